package cuda

import (
	"fmt"
	"unsafe"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// Asynchronous expert uploads from stable host memory (ops.StableHostMemory).
//
// An upload from an ordinary pinned buffer waits for its copy before it returns, because the caller may
// reuse the buffer at once. A buffer marked stable never changes again, so UploadExpert from one only
// queues the copy on the copy stream and returns: the engine can queue a whole layer's experts while the
// layer's attention is still running on the compute stream, and the copy engine never waits for the Go
// side. The compute stream is ordered after those copies where it first touches such an expert:
// ExpertsAccumulate and Free call joinCopies, which records an event on the copy stream and makes the
// compute stream wait for it (cuStreamWaitEvent: the device waits, the host does not).

var _ ops.StableHostMemory = (*Backend)(nil)

// MarkStable implements ops.StableHostMemory: buf, a whole buffer from AllocHost, will not change until
// FreeHost.
func (b *Backend) MarkStable(buf []byte) error {
	const op = "MarkStable"
	if len(buf) == 0 {
		return argErr(op, "empty buffer")
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	b.hosts.mu.Lock()
	defer b.hosts.mu.Unlock()
	if n, ok := b.hosts.m[p]; !ok || n != len(buf) {
		return fmt.Errorf("%w: %s: %#x (%d bytes) is not a whole buffer from AllocHost", ErrArgument, op, p, len(buf))
	}
	if b.hosts.stable == nil {
		b.hosts.stable = map[uintptr]bool{}
	}
	b.hosts.stable[p] = true
	return nil
}

// stableHost reports whether every part lies inside a buffer marked stable.
func (b *Backend) stableHost(parts ...[]byte) bool {
	b.hosts.mu.Lock()
	defer b.hosts.mu.Unlock()
	for _, src := range parts {
		if len(src) == 0 {
			continue
		}
		if p, ok := b.hosts.find(src); !ok || !b.hosts.stable[p] {
			return false
		}
	}
	return true
}

// joinCopies makes the compute stream wait (on the device) for every copy queued so far without a host
// wait: the asynchronous expert uploads. On the CUDA thread.
func (b *Backend) joinCopies() error {
	if !b.copyPending {
		return nil
	}
	d := b.drv
	if err := d.check("cuEventRecord(copy)", ccall(d.cuEventRecord, b.cev, b.cstrm)); err != nil {
		return err
	}
	if err := d.check("cuStreamWaitEvent", ccall(d.cuStreamWaitEvent, b.strm, b.cev, 0)); err != nil {
		return err
	}
	b.copyPending = false
	return nil
}
