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

// preadDirect reads buf from off of an O_DIRECT file until at least need bytes have arrived, the file
// ends, or a read fails. os.File.ReadAt would retry after a short read at the end of the file, at the
// unaligned offset where the file ends, which some file systems answer with EINVAL under O_DIRECT; here a
// short read that stops off an alignment boundary is the end of the file.
func preadDirect(f *os.File, buf []byte, off int64, need int) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	n := 0
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		for n < need {
			m, e := syscall.Pread(int(fd), buf[n:], off+int64(n))
			if e == syscall.EINTR {
				continue
			}
			if e != nil {
				rerr = &os.PathError{Op: "pread", Path: f.Name(), Err: e}
				break
			}
			n += m
			if m == 0 || (off+int64(n))%DirectAlignment != 0 {
				break
			}
		}
		return true // regular files never wait on the poller
	})
	if rerr != nil {
		return n, rerr
	}
	return n, err
}
