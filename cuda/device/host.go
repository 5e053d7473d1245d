package device

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// Pinned host memory and host transfers. Page-locked memory (cuMemHostAlloc) is what the copy engine reads
// at the full host-to-device rate; ordinary memory goes through the pinned staging buffer, copied into it
// by all CPUs at once.

// StagingMax bounds the pinned staging buffer; larger transfers go through it in pieces.
const StagingMax = 64 << 20

// Staging returns the pinned host staging buffer with at least min(n, StagingMax) bytes, reallocated
// (after Stream's work) when it is smaller.
func (d *Device) Staging(n int) ([]byte, error) {
	n = min(n, StagingMax)
	if d.nstg < n {
		dr := d.Drv
		if d.stage != nil {
			if err := d.Sync(); err != nil {
				return nil, err
			}
			if err := dr.Check("cuMemFreeHost", bind.Call(dr.CuMemFreeHost, uintptr(d.stage))); err != nil {
				return nil, err
			}
			d.stage, d.nstg = nil, 0
		}
		size := max(n, 1<<20)
		var p unsafe.Pointer
		if err := dr.Check(fmt.Sprintf("cuMemHostAlloc(%d bytes)", size), bind.Call(dr.CuMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(size), bind.MemHostAllocPortable)); err != nil {
			return nil, err
		}
		d.stage, d.nstg = p, size
	}
	return unsafe.Slice((*byte)(d.stage), d.nstg), nil
}

// A transfer larger than one piece alternates between the two halves of the staging buffer, so that the
// CPUs' copy of one piece runs while the copy engine moves the other: a staged transfer costs the larger
// of the two copies, not their sum (the state kept in host memory crosses this way every slice of every
// layer, docs/records/run37).

// ToDevice copies src to device address dst on Stream through the staging buffer; it returns once the
// last piece has arrived.
func (d *Device) ToDevice(dst uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	halves, err := d.stagingHalves(len(src))
	if err != nil {
		return err
	}
	dr := d.Drv
	var pending [2]uintptr // the event after each half's last copy out of it
	defer d.putEvents(pending[:])
	for i := 0; len(src) > 0; i++ {
		h := halves[i%len(halves)]
		if err := d.waitEvent(&pending[i%2]); err != nil { // the half's previous piece has left it
			return err
		}
		n := ParallelCopy(h, src)
		if err := dr.Check("cuMemcpyHtoDAsync", bind.Call(dr.CuMemcpyHtoDAsync, uintptr(dst), addrOf(h), uintptr(n), d.Stream)); err != nil {
			return err
		}
		if len(halves) > 1 {
			if pending[i%2], err = d.sync.Record(dr, d.Stream); err != nil {
				return errors.Join(err, d.Sync())
			}
		}
		dst += uint64(n)
		src = src[n:]
	}
	return d.Sync()
}

// ToHost copies len(dst) bytes from device address src into dst through the staging buffer, after all
// work queued on Stream (which it waits for: any asynchronous fault is reported here).
func (d *Device) ToHost(dst []byte, src uint64) error {
	if len(dst) == 0 {
		return nil
	}
	halves, err := d.stagingHalves(len(dst))
	if err != nil {
		return err
	}
	dr := d.Drv
	var pending [2]uintptr // the event after each half's copy into it
	defer d.putEvents(pending[:])
	// issue queues piece i (bytes off.. of the transfer) into its half.
	issue := func(i, off int) error {
		h := halves[i%len(halves)]
		n := min(len(h), len(dst)-off)
		if err := dr.Check("cuMemcpyDtoHAsync", bind.Call(dr.CuMemcpyDtoHAsync, addrOf(h), uintptr(src+uint64(off)), uintptr(n), d.Stream)); err != nil {
			return err
		}
		if len(halves) > 1 {
			var err error
			if pending[i%2], err = d.sync.Record(dr, d.Stream); err != nil {
				return errors.Join(err, d.Sync())
			}
		}
		return nil
	}
	if err := issue(0, 0); err != nil {
		return err
	}
	// One half holds the whole transfer (stagingHalves), so only two halves have a next piece.
	for i, off := 0, 0; off < len(dst); i++ {
		h := halves[i%len(halves)]
		n := min(len(h), len(dst)-off)
		if off+n < len(dst) { // the next piece comes into the other half meanwhile
			if err := issue(i+1, off+n); err != nil {
				return err
			}
		}
		if len(halves) > 1 {
			if err := d.waitEvent(&pending[i%2]); err != nil {
				return err
			}
		} else if err := d.Sync(); err != nil {
			return err
		}
		ParallelCopy(dst[off:off+n], h[:n])
		off += n
	}
	return d.Sync()
}

// stagingHalves returns the staging buffer whole, for a transfer of n bytes that fits it, or as two
// halves that a larger transfer alternates between.
func (d *Device) stagingHalves(n int) ([][]byte, error) {
	buf, err := d.Staging(n)
	if err != nil {
		return nil, err
	}
	if n <= len(buf) {
		return [][]byte{buf}, nil
	}
	half := len(buf) / 2 &^ 4095
	return [][]byte{buf[:half], buf[half : 2*half]}, nil
}

// waitEvent waits for *ev, if any, and gives it back to the pool.
func (d *Device) waitEvent(ev *uintptr) error {
	if *ev == 0 {
		return nil
	}
	err := d.Drv.Check("cuEventSynchronize(staging)", bind.Call(d.Drv.CuEventSynchronize, *ev))
	d.sync.Put(*ev)
	*ev = 0
	return err
}

// putEvents waits for the events a transfer still holds and gives them back: after a transfer that ended
// early on an error, no copy still reads or writes the staging buffer when the next transfer fills it (an
// error of the wait itself is the earlier error's, already returned).
func (d *Device) putEvents(evs []uintptr) {
	for i := range evs {
		_ = d.waitEvent(&evs[i])
	}
}

// addrOf is the address of a buffer's first byte.
func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// AllocPinned returns n bytes of page-locked, portable host memory (cuMemHostAlloc); FreePinned releases it.
func (d *Device) AllocPinned(n int) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	err := d.Drv.Check(fmt.Sprintf("cuMemHostAlloc(%d bytes)", n),
		bind.Call(d.Drv.CuMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n), bind.MemHostAllocPortable))
	return p, err
}

// FreePinned waits for CopyStream and the state stream (a copy may still read the buffer) and frees
// pinned memory p; with synced, the caller has synchronised the streams already (at Close).
func (d *Device) FreePinned(p uintptr, synced bool) error {
	dr := d.Drv
	if synced {
		return dr.Check("cuMemFreeHost", bind.Call(dr.CuMemFreeHost, p))
	}
	var serr error
	if d.state != 0 {
		serr = dr.Check("cuStreamSynchronize(state)", bind.Call(dr.CuStreamSynchronize, d.state))
	}
	return errors.Join(d.SyncCopy(), serr, dr.Check("cuMemFreeHost", bind.Call(dr.CuMemFreeHost, p)))
}

// CopyAsync queues the copy of pinned src to device address dst on CopyStream; the caller waits with
// SyncCopy before src may change.
func (d *Device) CopyAsync(dst uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	dr := d.Drv
	return dr.Check("cuMemcpyHtoDAsync(copy)", bind.Call(dr.CuMemcpyHtoDAsync, uintptr(dst), uintptr(unsafe.Pointer(unsafe.SliceData(src))), uintptr(len(src)), d.CopyStream))
}

// ToHostQueued queues the copy of len(dst) bytes at device address src into pinned dst on the compute
// stream and returns: dst holds them once the stream has passed the copy (Sync).
func (d *Device) ToHostQueued(dst []byte, src uint64) error {
	if len(dst) == 0 {
		return nil
	}
	dr := d.Drv
	return dr.Check("cuMemcpyDtoHAsync(queued)", bind.Call(dr.CuMemcpyDtoHAsync, uintptr(unsafe.Pointer(unsafe.SliceData(dst))), uintptr(src), uintptr(len(dst)), d.Stream))
}

// ToDeviceQueued queues the copy of pinned src to device address dst on the compute stream and returns:
// kernels queued after it read the copied bytes; src must not change until the stream has passed it.
func (d *Device) ToDeviceQueued(dst uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	dr := d.Drv
	return dr.Check("cuMemcpyHtoDAsync(queued)", bind.Call(dr.CuMemcpyHtoDAsync, uintptr(dst), uintptr(unsafe.Pointer(unsafe.SliceData(src))), uintptr(len(src)), d.Stream))
}

// StageCopy copies ordinary host memory src to dst on CopyStream through the staging buffer, waiting for
// each piece (the staging buffer is reused).
func (d *Device) StageCopy(dst uint64, src []byte) error {
	for len(src) > 0 {
		buf, err := d.Staging(len(src))
		if err != nil {
			return err
		}
		n := ParallelCopy(buf, src)
		if err := d.CopyAsync(dst, buf[:n]); err != nil {
			return err
		}
		if err := d.SyncCopy(); err != nil {
			return err
		}
		dst += uint64(n)
		src = src[n:]
	}
	return nil
}

// Copies of at least parallelCopyMin bytes are split over the CPUs in parts of at least copyPart bytes:
// one core's memmove reaches a fraction of the host's memory bandwidth.
const (
	parallelCopyMin = 4 << 20
	copyPart        = 1 << 20
)

// ParallelCopy is copy(dst, src), large copies spread over GOMAXPROCS goroutines.
func ParallelCopy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < parallelCopyMin {
		return copy(dst, src)
	}
	parts := min(runtime.GOMAXPROCS(0), n/copyPart)
	per := (n + parts - 1) / parts
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += per {
		hi := min(lo+per, n)
		wg.Go(func() { copy(dst[lo:hi], src[lo:hi]) })
	}
	wg.Wait()
	return n
}
