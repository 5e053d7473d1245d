package device

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// Kept buffers: device scratch that an op keeps from call to call, outside the stream-ordered pool.
//
// The CUDA backend's routed experts' path needs a few GB of scratch a call (two chunks of decoded weights, each lane's
// float32 outputs). Taken from the pool and freed at the op's end on the compute stream, those blocks are
// what the next experts' uploads, allocated on the copy stream, are given next: the allocator then orders
// the copies after the compute stream's free (its internal dependencies), so the copy engine waits for the
// experts' GEMMs. Kept buffers never return to the pool. A buffer grows when a call needs more (after the
// device finished every queued use of the old one) and lives until Close.

// keptBuf is one kept buffer.
type keptBuf struct {
	ptr  uint64
	size int
}

// Kept returns the kept buffer named key, of at least n bytes. A buffer too small is replaced: the device
// is synchronised first (compute, copy and side streams), since queued work may still use it.
func (dv *Device) Kept(key string, n int) (uint64, error) {
	if n <= 0 {
		return 0, nil
	}
	if k, ok := dv.keep[key]; ok && k.size >= n {
		return k.ptr, nil
	}
	d := dv.Drv
	if k, ok := dv.keep[key]; ok {
		if err := dv.SyncStreams(); err != nil {
			return 0, fmt.Errorf("growing %s: %w", key, err)
		}
		if err := d.Check("cuMemFree("+key+")", bind.Call(d.CuMemFree, uintptr(k.ptr))); err != nil {
			return 0, err
		}
		delete(dv.keep, key)
	}
	var p uint64
	if err := d.Check(fmt.Sprintf("cuMemAlloc(%s, %d bytes)", key, n), bind.Call(d.CuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n))); err != nil {
		return 0, err
	}
	if dv.keep == nil {
		dv.keep = map[string]keptBuf{}
	}
	dv.keep[key] = keptBuf{ptr: p, size: n}
	return p, nil
}

// releaseKept frees every kept buffer (at release, after the streams were synchronised).
func (dv *Device) releaseKept() error {
	var errs []error
	for key, k := range dv.keep {
		errs = append(errs, dv.Drv.Check("cuMemFree("+key+")", bind.Call(dv.Drv.CuMemFree, uintptr(k.ptr))))
	}
	dv.keep = nil
	return errors.Join(errs...)
}
