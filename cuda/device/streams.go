package device

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// Side streams: extra compute streams that a backend spreads independent work over (the CUDA backend's
// routed experts' GEMMs: cuda/experts_lt.go).
//
// One expert's GEMMs at a wave's typical rows fill the H200 badly: at 65,536 tokens an expert has about
// 1,170 rows, so its down GEMM (3,584 x 3,072 with 256 x 128 tiles) is 140 tiles on 132 SMs, two waves of
// which the second holds 8 tiles. Issued on one stream, each GEMM waits for the previous one's last wave.
// Spread over several streams, the next experts' tiles fill the SMs the tail leaves idle. The results do
// not change: each GEMM is the same pinned algorithm over the same operands (no split of k, no
// cross-block reduction), so a tile's sums do not depend on what runs beside it.
//
// Each side stream has its own scratch buffer (the CUDA backend's cuBLASLt workspace: the pinned
// algorithms keep a few bytes of counters there, which two concurrent GEMMs must not share).

// SideStream is one side stream and its scratch buffer.
type SideStream struct {
	Stream  uintptr
	Scratch uint64 // the scratch bytes SideStreams was asked for, of device memory (cuMemAlloc)
}

// SideStreams returns n side streams, creating the missing ones, each with scratch bytes of device
// memory (the first call's size: every side stream has the same). They live until Close.
func (dv *Device) SideStreams(n, scratch int) ([]SideStream, error) {
	d := dv.Drv
	for len(dv.side) < n {
		var s SideStream
		if err := d.Check("cuStreamCreate(side)", bind.Call(d.CuStreamCreate, uintptr(unsafe.Pointer(&s.Stream)), bind.StreamNonBlocking)); err != nil {
			return nil, err
		}
		if err := d.Check("cuMemAlloc(scratch of a side stream)", bind.Call(d.CuMemAlloc, uintptr(unsafe.Pointer(&s.Scratch)), uintptr(scratch))); err != nil {
			return nil, errors.Join(err, d.Check("cuStreamDestroy(side)", bind.Call(d.CuStreamDestroy, s.Stream)))
		}
		dv.side = append(dv.side, s)
	}
	return dv.side[:n], nil
}

// releaseSideStreams waits for the side streams and destroys them with their scratch buffers.
func (dv *Device) releaseSideStreams() error {
	d := dv.Drv
	var errs []error
	for i, s := range dv.side {
		errs = append(errs, d.Check(fmt.Sprintf("cuStreamSynchronize(side %d)", i), bind.Call(d.CuStreamSynchronize, s.Stream)))
		errs = append(errs, d.Check("cuMemFree(scratch of a side stream)", bind.Call(d.CuMemFree, uintptr(s.Scratch))))
		errs = append(errs, d.Check("cuStreamDestroy(side)", bind.Call(d.CuStreamDestroy, s.Stream)))
	}
	dv.side = nil
	return errors.Join(errs...)
}

// SyncEvents is the pool of events that order the side streams and Stream (timing off).
func (dv *Device) SyncEvents() *EventPool { return &dv.sync }

// WaitOn makes stream s wait for the work queued on stream from so far (an event of SyncEvents; the
// device waits, not the host).
func (dv *Device) WaitOn(s, from uintptr) error {
	ev, err := dv.sync.Record(dv.Drv, from)
	if err != nil {
		return err
	}
	defer dv.sync.Put(ev) // the queued wait keeps what the event captured
	return dv.Drv.Check("cuStreamWaitEvent(side)", bind.Call(dv.Drv.CuStreamWaitEvent, s, ev, 0))
}

// SyncStreams waits for Stream, CopyStream, the side streams and the state stream.
func (dv *Device) SyncStreams() error {
	d := dv.Drv
	strms := []uintptr{dv.Stream, dv.CopyStream}
	for _, s := range dv.side {
		strms = append(strms, s.Stream)
	}
	if dv.state != 0 {
		strms = append(strms, dv.state)
	}
	for _, s := range strms {
		if err := d.Check("cuStreamSynchronize", bind.Call(d.CuStreamSynchronize, s)); err != nil {
			return err
		}
	}
	return nil
}
