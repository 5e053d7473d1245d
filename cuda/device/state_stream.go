package device

import (
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// The state stream carries the transfers a backend starts ahead of their use (the CUDA backend's
// PrefetchBF16: the next slice's per-token state coming in while this slice computes). On CopyStream
// they would queue behind the weight uploads of the layer, which a sliced layer issues in its first
// slice; on Stream they would run between two slices' kernels, with the SMs idle.

// StateStream returns the state stream, created on first need; Close destroys it.
func (dv *Device) StateStream() (uintptr, error) {
	if dv.state != 0 {
		return dv.state, nil
	}
	d := dv.Drv
	if err := d.Check("cuStreamCreate(state)", bind.Call(d.CuStreamCreate, uintptr(unsafe.Pointer(&dv.state)), bind.StreamNonBlocking)); err != nil {
		dv.state = 0
		return 0, err
	}
	return dv.state, nil
}

// StateStreamAfter returns the state stream, made to wait (on the device) for the work queued on stream
// from so far: what a copy there reads or writes was made or allocated before it.
func (dv *Device) StateStreamAfter(from uintptr) (uintptr, error) {
	s, err := dv.StateStream()
	if err != nil {
		return 0, err
	}
	return s, dv.WaitOn(s, from)
}

// CopyOn queues the copy of pinned src to device address dst on stream s and returns: src must not
// change until s has passed the copy.
func (dv *Device) CopyOn(s uintptr, dst uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	d := dv.Drv
	return d.Check("cuMemcpyHtoDAsync(state)", bind.Call(d.CuMemcpyHtoDAsync, uintptr(dst), uintptr(unsafe.Pointer(unsafe.SliceData(src))), uintptr(len(src)), s))
}

// releaseStateStream waits for the state stream and destroys it (at Close).
func (dv *Device) releaseStateStream() error {
	if dv.state == 0 {
		return nil
	}
	d := dv.Drv
	err := dv.SyncState()
	if derr := d.Check("cuStreamDestroy(state)", bind.Call(d.CuStreamDestroy, dv.state)); err == nil {
		err = derr
	}
	dv.state = 0
	return err
}

// ToHostOn queues the copy of len(dst) bytes at device address src into pinned dst on stream s and
// returns: dst holds them once s has passed the copy.
func (dv *Device) ToHostOn(s uintptr, dst []byte, src uint64) error {
	if len(dst) == 0 {
		return nil
	}
	d := dv.Drv
	return d.Check("cuMemcpyDtoHAsync(state)", bind.Call(d.CuMemcpyDtoHAsync, uintptr(unsafe.Pointer(unsafe.SliceData(dst))), uintptr(src), uintptr(len(dst)), s))
}

// FreeOn releases device memory after the work queued on stream s (0 is a no-op); without stream-ordered
// allocation it waits for s, then frees.
func (dv *Device) FreeOn(s uintptr, p uint64) error {
	if p == 0 {
		return nil
	}
	d := dv.Drv
	if dv.Async {
		return d.Check("cuMemFreeAsync(state)", bind.Call(d.CuMemFreeAsync, uintptr(p), s))
	}
	if err := d.Check("cuStreamSynchronize(state)", bind.Call(d.CuStreamSynchronize, s)); err != nil {
		return err
	}
	return d.Check("cuMemFree", bind.Call(d.CuMemFree, uintptr(p)))
}

// SyncState waits for the work queued on the state stream (nothing before it exists).
func (dv *Device) SyncState() error {
	if dv.state == 0 {
		return nil
	}
	d := dv.Drv
	return d.Check("cuStreamSynchronize(state)", bind.Call(d.CuStreamSynchronize, dv.state))
}
