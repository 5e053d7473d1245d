//go:build unix

package job

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// LockName is the lock file in a job directory: one job at a time writes there.
const LockName = ".lock"

// lockDir takes an exclusive flock on dir's lock file, failing at once when another process holds it. The
// kernel drops the lock when the process dies, kill -9 included, so a crashed job never blocks a resume.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, LockName), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("job: %s is in use by another job (%v): one job a directory; give each shard its own", dir, err)
	}
	return func() { f.Close() }, nil
}
