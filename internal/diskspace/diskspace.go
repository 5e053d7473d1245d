// Package diskspace says how many bytes a file system can still take, so that a command can refuse or
// warn before hours of compute rather than fail at the write after them.
package diskspace

// Free is the bytes available to an unprivileged user on the file system holding path, and whether the
// system said (false off Unix, or where path cannot be examined: the write is then simply attempted).
func Free(path string) (int64, bool) { return free(path) }
