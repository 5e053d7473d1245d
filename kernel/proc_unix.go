//go:build unix

package kernel

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// detached puts the background engine in a session of its own, so that it outlives the cell's process
// and no signal sent to the cell's process group (an interrupted cell) reaches it.
func detached() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// terminate asks process pid to stop gracefully.
func terminate(pid int) error { return syscall.Kill(pid, syscall.SIGTERM) }

// terminateGroup stops the session that start created (go run and the server it runs).
func terminateGroup(pid int) { syscall.Kill(-pid, syscall.SIGTERM) }

// alive reports whether process pid exists.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// lockHeld reports whether some process holds an flock on path (false when there is no such file). It
// takes the lock for a moment when it is free, so call it only where nothing may be starting to take it.
func lockHeld(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// lockFile takes an exclusive lock on path, waiting for it, and returns its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}
