//go:build !linux

package checkpoint

import (
	"errors"
	"os"
)

var errNoDirect = errors.New("checkpoint: O_DIRECT is only used on Linux")

// openDirect always refuses: direct I/O is only implemented for Linux; reads fall back to buffered.
func openDirect(string) (*os.File, error) { return nil, errNoDirect }

// directRefused reports whether err means "no direct I/O here".
func directRefused(err error) bool { return errors.Is(err, errNoDirect) }

// preadDirect is never reached where openDirect always refuses; it reads like ReadAt for completeness.
func preadDirect(f *os.File, buf []byte, off int64, need int) (int, error) {
	n, err := f.ReadAt(buf, off)
	if n >= need {
		err = nil
	}
	return n, err
}
