package cuda

import (
	"errors"
	"fmt"
	"unsafe"
)

// The op-input ring: small host-to-device uploads that ops make as they run (index lists, tile tables, a
// grouped expert call's plan, pointer tables) go through a ring of pinned, device-mapped host memory
// instead of the staging buffer. The staging buffer is reused by the next transfer, so toDevice waits for
// the stream after each copy: every such op drained the compute stream, and the device then idled while
// the host queued the op's kernels (at 65,536 tokens, 45% of a MoE layer's expert time with the experts in
// calls of 128). A ring region is written once, copied on the compute stream (ordered before the kernels
// that read it) and reused only after the event recorded behind that copy has completed, so an upload
// never waits for the work queued before it.
//
// The copy is a kernel (k_copy16) that reads the mapped region over the bus, not cuMemcpyHtoDAsync: the
// copy engine runs host-to-device copies in the order they reach it, so with the uploads ahead of the
// kernels a small copy on the compute stream waited behind the layer's 15.7 GB of expert copies on the
// copy stream (the op profile on the H200: ShortConvSiLU and MLA, the first ops of a layer to upload,
// took 290 ms at 16,384 tokens).

// ringSize is the pinned memory of the ring; an upload larger than half of it takes the staging path.
const ringSize = 64 << 20

// ringAlign is the alignment of each region (16 bytes suffices for the kernels' vector loads).
const ringAlign = 256

// uploadRing is the ring's state, touched only on the CUDA thread.
type uploadRing struct {
	buf     unsafe.Pointer // ringSize bytes of pinned host memory, allocated on first use
	dev     uint64         // its device address (mapped)
	head    int            // where the next region starts
	pending []ringSpan     // regions whose copies may still be in flight, oldest first
	idle    []uintptr      // events free for the next region
	all     []uintptr      // every event created, destroyed at release
}

// ringSpan is one region of the ring and the event recorded after its copy.
type ringSpan struct {
	start, end int
	ev         uintptr
}

// uploadAsync copies src to device address dst (16-byte aligned) on the compute stream without waiting
// for the stream: through the ring, or, when src is larger than half the ring, through the staging
// buffer (toDevice).
func (c *opCtx) uploadAsync(dst uint64, src []byte) error {
	n := (len(src) + ringAlign - 1) &^ (ringAlign - 1)
	if n == 0 {
		return nil
	}
	b := c.b
	if n > ringSize/2 {
		return b.toDevice(dst, src)
	}
	r, d := &b.ring, b.drv
	if r.buf == nil {
		var p unsafe.Pointer
		if err := d.check(fmt.Sprintf("cuMemHostAlloc(%d bytes, upload ring)", ringSize),
			ccall(d.cuMemHostAlloc, uintptr(unsafe.Pointer(&p)), ringSize, cuMemHostAllocPortable|cuMemHostAllocDeviceMap)); err != nil {
			return err
		}
		var dp uint64
		if err := d.check("cuMemHostGetDevicePointer(upload ring)", ccall(d.cuMemHostGetDevicePointer, uintptr(unsafe.Pointer(&dp)), uintptr(p), 0)); err != nil {
			return errors.Join(err, d.check("cuMemFreeHost(upload ring)", ccall(d.cuMemFreeHost, uintptr(p))))
		}
		r.buf, r.dev = p, dp
	}
	at := r.head
	if at+n > ringSize {
		at = 0
	}
	// The regions in flight that overlap [at, at+n) are at the front of pending: positions rise with age
	// within a lap, and the newer lap lies below at.
	for len(r.pending) > 0 && r.pending[0].start < at+n && r.pending[0].end > at {
		s := r.pending[0]
		if err := d.check("cuEventSynchronize(upload ring)", ccall(d.cuEventSynchronize, s.ev)); err != nil {
			return err
		}
		r.idle = append(r.idle, s.ev)
		r.pending = r.pending[1:]
	}
	copy(unsafe.Slice((*byte)(unsafe.Add(r.buf, at)), len(src)), src)
	if err := c.launch1D("k_copy16", max(len(src)/16, 1), dst, r.dev+uint64(at), int64(len(src))); err != nil {
		return err
	}
	ev, err := r.event(d)
	if err != nil {
		return err
	}
	if err := d.check("cuEventRecord(upload ring)", ccall(d.cuEventRecord, ev, b.strm)); err != nil {
		r.idle = append(r.idle, ev)
		// the copy is queued but unguarded: wait for it before the region can be reused
		return errors.Join(err, d.check("cuStreamSynchronize", ccall(d.cuStreamSynchronize, b.strm)))
	}
	r.pending = append(r.pending, ringSpan{start: at, end: at + n, ev: ev})
	r.head = at + n
	return nil
}

// event returns an event (timing off) from the free list, or a new one.
func (r *uploadRing) event(d *driver) (uintptr, error) {
	if n := len(r.idle); n > 0 {
		ev := r.idle[n-1]
		r.idle = r.idle[:n-1]
		return ev, nil
	}
	var ev uintptr
	if err := d.check("cuEventCreate(upload ring)", ccall(d.cuEventCreate, uintptr(unsafe.Pointer(&ev)), cuEventDisableTiming)); err != nil {
		return 0, err
	}
	r.all = append(r.all, ev)
	return ev, nil
}

// destroy frees the ring and its events (at release, after the streams were synchronised).
func (r *uploadRing) destroy(d *driver) error {
	var errs []error
	for _, ev := range r.all {
		errs = append(errs, d.check("cuEventDestroy(upload ring)", ccall(d.cuEventDestroy, ev)))
	}
	if r.buf != nil {
		errs = append(errs, d.check("cuMemFreeHost(upload ring)", ccall(d.cuMemFreeHost, uintptr(r.buf))))
	}
	*r = uploadRing{}
	return errors.Join(errs...)
}
