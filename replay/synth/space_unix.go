//go:build unix

package synth

import "syscall"

// freeBytes returns the bytes available to an unprivileged user on the file system holding path.
func freeBytes(path string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}
