package kernel

import "github.com/potato-k3/potato-k3/internal/filelock"

// lockFile takes the lock on path, waiting for it, and returns its release (internal/filelock); off Unix,
// where there are no such locks, errNoBackground (the background engine is not started there).
func lockFile(path string) (func(), error) {
	if !filelock.Supported {
		return nil, errNoBackground
	}
	l, err := filelock.Acquire(path, 0o600, true)
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

// lockHeld reports whether some process holds the lock on path (false when there is no such file). It
// takes the lock for a moment when it is free, so call it only where nothing may be starting to take it.
func lockHeld(path string) bool { return filelock.Held(path) }
