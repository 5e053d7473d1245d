package device

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// The op-input ring: small host-to-device uploads that ops make as they run (index lists, tile tables, a
// grouped expert call's plan, pointer tables) go through a ring of pinned, device-mapped host memory
// instead of the staging buffer. The staging buffer is reused by the next transfer, so ToDevice waits for
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

// RingSize is the pinned memory of the upload ring; an upload larger than half of it takes the staging path.
const RingSize = 64 << 20

// ringAlign is the alignment of each region (16 bytes suffices for the kernels' vector loads).
const ringAlign = 256

// uploadRing is the ring's state, touched only on the CUDA thread.
type uploadRing struct {
	buf    unsafe.Pointer // RingSize bytes of pinned host memory, allocated on first use
	dev    uint64         // its device address (mapped)
	alloc  ringAlloc      // where regions go, and which are still in flight
	events EventPool      // the regions' events (timing off)
}

// ringAlloc places regions in the ring (no CUDA calls: ring_test.go checks it on any machine).
type ringAlloc struct {
	size    int
	head    int        // where the next region starts
	pending []ringSpan // regions whose copies may still be in flight, in the order they were queued
}

// ringSpan is one region of the ring and the event recorded after its copy.
type ringSpan struct {
	start, end int
	ev         uintptr
}

// place returns where a region of n bytes (n <= size) goes, after head or at 0 when it does not fit
// there, and the index in pending of the last region in flight that it overlaps (-1: none). Every copy
// runs on one stream, in order: once that region's copy is done, so are those queued before it.
func (a *ringAlloc) place(n int) (at, last int) {
	at, last = a.head, -1
	if at+n > a.size {
		at = 0
	}
	for i, s := range a.pending {
		if s.start < at+n && s.end > at {
			last = i
		}
	}
	return at, last
}

// retire drops pending[:k] (their copies are done) and returns their events.
func (a *ringAlloc) retire(k int) []uintptr {
	evs := make([]uintptr, k)
	for i, s := range a.pending[:k] {
		evs[i] = s.ev
	}
	a.pending = a.pending[k:]
	return evs
}

// commit records the region [at, at+n) as in flight until ev.
func (a *ringAlloc) commit(at, n int, ev uintptr) {
	a.pending = append(a.pending, ringSpan{start: at, end: at + n, ev: ev})
	a.head = at + n
}

// CopyKernel is the kernel the ring's copies run: k_copy16(u64 dst, const u64 src, i64 bytes), a
// grid-stride copy of 16 bytes a thread (the backend's elementwise.cu defines it; Load must have loaded
// it before the first UploadAsync).
const CopyKernel = "k_copy16"

// UploadAsync copies src to device address dst (16-byte aligned) without waiting for the streams: through
// the ring, the copy kernel launched on stream s (Stream, or the side stream the caller's op runs on) and
// the region's event recorded on Stream; or, when src is larger than half the ring, through the staging
// buffer (ToDevice).
func (dv *Device) UploadAsync(s uintptr, dst uint64, src []byte) error {
	n := (len(src) + ringAlign - 1) &^ (ringAlign - 1)
	if n == 0 {
		return nil
	}
	if n > RingSize/2 {
		return dv.ToDevice(dst, src)
	}
	r, d := &dv.ring, dv.Drv
	if r.buf == nil {
		var p unsafe.Pointer
		if err := d.Check(fmt.Sprintf("cuMemHostAlloc(%d bytes, upload ring)", RingSize),
			bind.Call(d.CuMemHostAlloc, uintptr(unsafe.Pointer(&p)), RingSize, bind.MemHostAllocPortable|bind.MemHostAllocDeviceMap)); err != nil {
			return err
		}
		var dp uint64
		if err := d.Check("cuMemHostGetDevicePointer(upload ring)", bind.Call(d.CuMemHostGetDevicePointer, uintptr(unsafe.Pointer(&dp)), uintptr(p), 0)); err != nil {
			return errors.Join(err, d.Check("cuMemFreeHost(upload ring)", bind.Call(d.CuMemFreeHost, uintptr(p))))
		}
		r.buf, r.dev, r.alloc = p, dp, ringAlloc{size: RingSize}
	}
	// Regions whose copies are done go first (a query, no wait), so that pending stays short.
	done := 0
	for done < len(r.alloc.pending) && bind.Call(d.CuEventQuery, r.alloc.pending[done].ev) == bind.Success {
		done++
	}
	r.events.Put(r.alloc.retire(done)...)
	at, last := r.alloc.place(n)
	if last >= 0 {
		if err := d.Check("cuEventSynchronize(upload ring)", bind.Call(d.CuEventSynchronize, r.alloc.pending[last].ev)); err != nil {
			return err
		}
		r.events.Put(r.alloc.retire(last + 1)...)
	}
	ev, err := r.events.Get(d) // before the copy is queued: a failure leaves nothing in flight
	if err != nil {
		return err
	}
	copy(unsafe.Slice((*byte)(unsafe.Add(r.buf, at)), len(src)), src)
	if err := dv.launchCopy(s, dst, r.dev+uint64(at), len(src)); err != nil {
		r.events.Put(ev)
		return err
	}
	if err := d.Check("cuEventRecord(upload ring)", bind.Call(d.CuEventRecord, ev, dv.Stream)); err != nil {
		r.events.Put(ev)
		// the copy is queued but unguarded: wait for it before the region can be reused
		return errors.Join(err, dv.Sync())
	}
	r.alloc.commit(at, n, ev)
	return nil
}

// destroy frees the ring and its events (at release, after the streams were synchronised).
func (r *uploadRing) destroy(d *bind.Driver) error {
	errs := []error{r.events.Destroy(d)}
	if r.buf != nil {
		errs = append(errs, d.Check("cuMemFreeHost(upload ring)", bind.Call(d.CuMemFreeHost, uintptr(r.buf))))
	}
	r.buf, r.dev, r.alloc = nil, 0, ringAlloc{}
	return errors.Join(errs...)
}

// launchCopy launches CopyKernel on stream s for n bytes from src to dst: 256 threads a block, a thread
// per 16 bytes, at most 2^20 blocks (the grid-stride loop covers the rest), as the backend's launch1D.
func (dv *Device) launchCopy(s uintptr, dst, src uint64, n int) error {
	f, ok := dv.Func(CopyKernel)
	if !ok {
		return fmt.Errorf("%w: no kernel %s loaded", ErrInternal, CopyKernel)
	}
	const threads, maxGrid = 256, 1 << 20
	elems := max(n/16, 1)
	grid := min((elems+threads-1)/threads, maxGrid)
	vals := [3]uint64{dst, src, uint64(int64(n))}
	ptrs := [4]unsafe.Pointer{unsafe.Pointer(&vals[0]), unsafe.Pointer(&vals[1]), unsafe.Pointer(&vals[2])}
	d := dv.Drv
	rc := bind.Call(d.CuLaunchKernel, f, uintptr(grid), 1, 1, threads, 1, 1, 0, s, uintptr(unsafe.Pointer(&ptrs[0])), 0)
	runtime.KeepAlive(&vals)
	runtime.KeepAlive(&ptrs)
	return d.Check(fmt.Sprintf("cuLaunchKernel(%s, grid {%d 1 1}, block {%d 1 1}, shared 0)", CopyKernel, grid, threads), rc)
}
