//go:build unix

package synth

import (
	"os"
	"path/filepath"
	"syscall"
)

// holdOwner creates the owner file in dir under a name sweeps ignore, takes an exclusive flock on it and
// only then renames it to ownerFile (the lock belongs to the open file, not the name): a sweep can never
// find the owner file of a live writer unlocked, even in the instant between creating and locking it.
func holdOwner(dir string) (*os.File, error) {
	staged := filepath.Join(dir, ownerFile+".new")
	f, err := os.OpenFile(staged, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	if err := os.Rename(staged, filepath.Join(dir, ownerFile)); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// abandoned reports whether no live process holds the staging directory dir: its owner file is there and
// its flock free. A directory without an owner file is left alone.
func abandoned(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, ownerFile), os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil // closing releases it
}
