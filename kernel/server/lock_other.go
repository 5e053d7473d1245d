//go:build !unix

package server

import (
	"fmt"
	"os"
)

// lockSpill creates dir. Without flock there is no lock: run one server per spill directory.
func lockSpill(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("server: spill directory: %w", err)
	}
	return nil, nil
}

// unlockSpill does nothing where lockSpill takes no lock.
func unlockSpill(*os.File) {}
