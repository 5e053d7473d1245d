package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/potato-k3/potato-k3/internal/filelock"
)

// lockSpill creates dir and takes the lock on dir/.lock for the server's life (internal/filelock), with
// the server's pid written in it. Two servers on one spill directory would each take the other's running
// jobs for the remains of a crash; the second is refused instead, naming the first's pid. The lock goes
// with the process, so a crashed server leaves no stale lock. Off Unix nothing is held: run one server a
// spill directory.
func lockSpill(dir string) (*filelock.Lock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("server: spill directory: %w", err)
	}
	path := filepath.Join(dir, ".lock")
	l, err := filelock.Acquire(path, 0o600, false)
	if errors.Is(err, filelock.ErrHeld) {
		holder, _ := os.ReadFile(path)
		return nil, fmt.Errorf("server: spill directory %s is in use by another server (pid %s): give another --spill",
			dir, strings.TrimSpace(string(holder)))
	}
	if err != nil {
		return nil, fmt.Errorf("server: spill directory: %w", err)
	}
	if filelock.Supported {
		_ = os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600) // for the message above; the lock is the file's, not its contents'
	}
	return l, nil
}

// unlockSpill releases the lock taken by lockSpill.
func unlockSpill(l *filelock.Lock) { l.Unlock() }
