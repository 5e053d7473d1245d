//go:build !unix

package synth

// freeBytes is unknown off Unix: the write is attempted and fails on a full disk.
func freeBytes(string) (int64, bool) { return 0, false }
