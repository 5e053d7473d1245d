//go:build unix

package tables

import (
	"os"
	"path/filepath"
	"syscall"
)

// holdStaging takes an exclusive flock on the owner file inside a set's staging directory, held until
// release: the kernel drops it when the process dies, kill -9 included, so sweepStaging can tell a
// staging directory a live writer is filling from one a killed writer left.
func holdStaging(tmp string) (release func(), err error) {
	f, err := os.OpenFile(filepath.Join(tmp, stagingOwner), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// abandoned reports whether no live process holds the staging directory tmp: its owner file is there and
// its flock free. A directory without an owner file (a writer between making it and locking it, or one
// from before owner files) is left alone.
func abandoned(tmp string) bool {
	f, err := os.OpenFile(filepath.Join(tmp, stagingOwner), os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil // closing releases it
}
