//go:build linux

package checkpoint

import (
	"errors"
	"os"
	"syscall"
)

// openDirect opens path read-only with O_DIRECT. File systems without direct I/O refuse at open (EINVAL).
func openDirect(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
}

// directRefused reports whether err means "no direct I/O here" rather than a real failure: EINVAL at open
// (unsupported file system) or at read (an alignment the device does not accept).
func directRefused(err error) bool { return errors.Is(err, syscall.EINVAL) }
