package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// Side streams: extra compute streams that the routed experts' GEMMs are spread over (experts_lt.go).
//
// One expert's GEMMs at a wave's typical rows fill the H200 badly: at 65,536 tokens an expert has about
// 1,170 rows, so its down GEMM (3,584 x 3,072 with 256 x 128 tiles) is 140 tiles on 132 SMs, two waves of
// which the second holds 8 tiles. Issued on one stream, each GEMM waits for the previous one's last wave.
// Spread over several streams, the next experts' tiles fill the SMs the tail leaves idle. The results do
// not change: each GEMM is the same pinned algorithm over the same operands (no split of k, no
// cross-block reduction), so a tile's sums do not depend on what runs beside it.
//
// Each side stream has its own cuBLASLt workspace: the pinned algorithms keep a few bytes of counters
// there (cublaslt_plan.go), which two concurrent GEMMs must not share.

// sideStream is one side stream and its cuBLASLt workspace.
type sideStream struct {
	strm uintptr
	ws   uint64 // ltWorkspaceAlloc bytes of device memory (cuMemAlloc)
}

// sideStreams returns n side streams, creating the missing ones (on the CUDA thread). They live until
// release.
func (b *Backend) sideStreams(n int) ([]sideStream, error) {
	d := b.drv
	for len(b.side) < n {
		var s sideStream
		if err := d.Check("cuStreamCreate(side)", bind.Call(d.CuStreamCreate, uintptr(unsafe.Pointer(&s.strm)), bind.StreamNonBlocking)); err != nil {
			return nil, err
		}
		if err := d.Check("cuMemAlloc(cuBLASLt workspace of a side stream)", bind.Call(d.CuMemAlloc, uintptr(unsafe.Pointer(&s.ws)), ltWorkspaceAlloc)); err != nil {
			return nil, errors.Join(err, d.Check("cuStreamDestroy(side)", bind.Call(d.CuStreamDestroy, s.strm)))
		}
		b.side = append(b.side, s)
	}
	return b.side[:n], nil
}

// releaseSideStreams waits for the side streams and destroys them with their workspaces.
func (b *Backend) releaseSideStreams() error {
	d := b.drv
	var errs []error
	for i, s := range b.side {
		errs = append(errs, d.Check(fmt.Sprintf("cuStreamSynchronize(side %d)", i), bind.Call(d.CuStreamSynchronize, s.strm)))
		errs = append(errs, d.Check("cuMemFree(cuBLASLt workspace of a side stream)", bind.Call(d.CuMemFree, uintptr(s.ws))))
		errs = append(errs, d.Check("cuStreamDestroy(side)", bind.Call(d.CuStreamDestroy, s.strm)))
	}
	b.side = nil
	return errors.Join(errs...)
}

// waitOn makes stream s wait for the work queued on stream from so far (an event of the backend's sync
// pool; the device waits, not the host).
func (b *Backend) waitOn(s, from uintptr) error {
	ev, err := b.syncEvs.Record(b.drv, from)
	if err != nil {
		return err
	}
	defer b.syncEvs.Put(ev) // the queued wait keeps what the event captured
	return b.drv.Check("cuStreamWaitEvent(side)", bind.Call(b.drv.CuStreamWaitEvent, s, ev, 0))
}
