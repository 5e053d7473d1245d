//go:build unix

package filelock

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

const supported = true

func lock(path string, perm uint32, wait bool) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, os.FileMode(perm))
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	if err := flock(f, how); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", path, ErrHeld)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// flock is syscall.Flock, retried when a signal interrupts a wait.
func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

func held(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close() // releases the lock if it was taken
	return errors.Is(flock(f, syscall.LOCK_EX|syscall.LOCK_NB), syscall.EWOULDBLOCK)
}

func abandoned(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return flock(f, syscall.LOCK_EX|syscall.LOCK_NB) == nil
}
