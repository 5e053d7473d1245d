package device

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// Device is one GPU's primary context and the machinery a backend runs on it: the compute stream, the
// copy stream, stream-ordered device memory, the pinned staging buffer, the upload ring, kept buffers,
// side streams and the loaded kernel modules. Every method runs on the CUDA thread (Thread) with the
// context current, after Open and before Close; none is safe for concurrent use.
type Device struct {
	Drv *bind.Driver
	// Dev is the CUdevice; Ctx its retained primary context.
	Dev int32
	Ctx uintptr
	// Stream runs every kernel and the copies of the ops' inputs and outputs; CopyStream the weight
	// uploads, beside the kernels.
	Stream, CopyStream uintptr
	// Async is stream-ordered allocation (cuMemAllocAsync from the device's pool) being available;
	// without it Malloc and Free are cuMemAlloc and a synchronised cuMemFree.
	Async bool
	// Pool is the device's default memory pool (with Async): it keeps freed blocks for reuse.
	Pool uintptr

	mods []uintptr
	fns  map[string]uintptr

	stage unsafe.Pointer // pinned staging buffer for host transfers (host.go)
	nstg  int
	ring  uploadRing         // pinned memory for the ops' small uploads (ring.go)
	side  []SideStream       // extra compute streams (streams.go)
	state uintptr            // the stream of transfers started ahead of their use (state_stream.go)
	keep  map[string]keptBuf // scratch kept from call to call outside the pool (kept.go)
	sync  EventPool          // events ordering the side streams and Stream (streams.go)
}

// Open retains device dev's primary context and makes it current on the calling thread (which must stay
// the CUDA thread: Thread's init), creates the two streams and, with async, makes the device's memory
// pool keep freed blocks instead of returning them at each synchronisation. On an error everything made
// so far is released.
func Open(drv *bind.Driver, dev int32, async bool) (*Device, error) {
	d := &Device{Drv: drv, Dev: dev, Async: async, fns: map[string]uintptr{},
		ring: uploadRing{events: EventPool{Flags: bind.EventDisableTiming, What: "upload ring"}},
		sync: EventPool{Flags: bind.EventDisableTiming, What: "side stream"}}
	if err := d.open(); err != nil {
		return nil, errors.Join(err, d.Close())
	}
	return d, nil
}

func (d *Device) open() error {
	dr := d.Drv
	if err := dr.Check("cuDevicePrimaryCtxRetain", bind.Call(dr.CuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&d.Ctx)), uintptr(d.Dev))); err != nil {
		return err
	}
	if err := dr.Check("cuCtxSetCurrent", bind.Call(dr.CuCtxSetCurrent, d.Ctx)); err != nil {
		return err
	}
	if err := dr.Check("cuStreamCreate", bind.Call(dr.CuStreamCreate, uintptr(unsafe.Pointer(&d.Stream)), bind.StreamNonBlocking)); err != nil {
		return err
	}
	if err := dr.Check("cuStreamCreate(copy)", bind.Call(dr.CuStreamCreate, uintptr(unsafe.Pointer(&d.CopyStream)), bind.StreamNonBlocking)); err != nil {
		return err
	}
	if d.Async {
		var pool uintptr
		if err := dr.Check("cuDeviceGetDefaultMemPool", bind.Call(dr.CuDeviceGetDefaultMemPool, uintptr(unsafe.Pointer(&pool)), uintptr(d.Dev))); err != nil {
			return err
		}
		threshold := ^uint64(0) // keep freed blocks in the pool instead of returning them at each sync
		if err := dr.Check("cuMemPoolSetAttribute(release threshold)", bind.Call(dr.CuMemPoolSetAttribute, pool, bind.MempoolAttrReleaseThreshold, uintptr(unsafe.Pointer(&threshold)))); err != nil {
			return err
		}
		d.Pool = pool
	}
	return nil
}

// PoolIdle is the memory the pool holds from the device and has not allocated (freed blocks it keeps for
// reuse): free for new allocations, though the driver counts it as used. 0 without a pool.
func (d *Device) PoolIdle() (int64, error) {
	reserved, err := d.poolAttr(bind.MempoolAttrReservedMemCurrent, "reserved")
	if err != nil {
		return 0, err
	}
	used, err := d.poolAttr(bind.MempoolAttrUsedMemCurrent, "used")
	if err != nil {
		return 0, err
	}
	return reserved - min(used, reserved), nil
}

// PoolUsed is the memory the pool has allocated now (0 without a pool).
func (d *Device) PoolUsed() (int64, error) {
	return d.poolAttr(bind.MempoolAttrUsedMemCurrent, "used")
}

// PoolHigh is the pool's high-water marks since ResetPoolHigh (or the pool's creation): the most it had
// allocated (used) and the most it held from the device (reserved, freed blocks it keeps included).
// Zeros without a pool.
func (d *Device) PoolHigh() (used, reserved int64, err error) {
	if used, err = d.PoolUsedHigh(); err != nil {
		return 0, 0, err
	}
	reserved, err = d.poolAttr(bind.MempoolAttrReservedMemHigh, "reserved high")
	return used, reserved, err
}

// PoolUsedHigh is PoolHigh's allocated mark alone.
func (d *Device) PoolUsedHigh() (int64, error) {
	return d.poolAttr(bind.MempoolAttrUsedMemHigh, "used high")
}

// PoolReserved is the memory the pool holds from the device now (allocated or kept). 0 without a pool.
func (d *Device) PoolReserved() (int64, error) {
	return d.poolAttr(bind.MempoolAttrReservedMemCurrent, "reserved")
}

// ResetPoolHigh starts PoolHigh's marks again from what the pool holds now.
func (d *Device) ResetPoolHigh() error {
	if err := d.ResetPoolUsedHigh(); err != nil {
		return err
	}
	return d.resetMark(bind.MempoolAttrReservedMemHigh, "reserved high")
}

// ResetPoolUsedHigh starts the allocated mark alone again from what the pool has allocated now, the
// reserved mark left as it is.
func (d *Device) ResetPoolUsedHigh() error {
	return d.resetMark(bind.MempoolAttrUsedMemHigh, "used high")
}

// resetMark restarts one of the pool's high-water marks (name for the error) from its current count (the
// driver takes 0 to mean that); nothing without a pool.
func (d *Device) resetMark(attr uintptr, name string) error {
	if d.Pool == 0 {
		return nil
	}
	var zero uint64
	dr := d.Drv
	return dr.Check("cuMemPoolSetAttribute("+name+")", bind.Call(dr.CuMemPoolSetAttribute, d.Pool, attr, uintptr(unsafe.Pointer(&zero))))
}

// poolAttr reads one of the pool's 64-bit byte counts (name for the error); 0 without a pool.
func (d *Device) poolAttr(attr uintptr, name string) (int64, error) {
	if d.Pool == 0 {
		return 0, nil
	}
	var v uint64
	dr := d.Drv
	err := dr.Check("cuMemPoolGetAttribute("+name+")", bind.Call(dr.CuMemPoolGetAttribute, d.Pool, attr, uintptr(unsafe.Pointer(&v))))
	return int64(v), err
}

// Module is one compiled image and the extern "C" kernels to look up in it.
type Module struct {
	Name    string // names the module in errors, e.g. "matmul.cu"
	Image   []byte
	Kernels []string
}

// Load loads the modules and looks up their kernels, which Func then returns by name. Close unloads them.
func (d *Device) Load(mods []Module) error {
	dr := d.Drv
	for _, m := range mods {
		var mod uintptr
		if err := dr.Check("cuModuleLoadData("+m.Name+")", bind.Call(dr.CuModuleLoadData, uintptr(unsafe.Pointer(&mod)), uintptr(unsafe.Pointer(&m.Image[0])))); err != nil {
			return err
		}
		d.mods = append(d.mods, mod)
		for _, k := range m.Kernels {
			var f uintptr
			cname := bind.CString(k)
			if err := dr.Check("cuModuleGetFunction("+k+")", bind.Call(dr.CuModuleGetFunction, uintptr(unsafe.Pointer(&f)), mod, uintptr(unsafe.Pointer(&cname[0])))); err != nil {
				return err
			}
			d.fns[k] = f
		}
	}
	return nil
}

// Func returns the loaded kernel name (a CUfunction), or false.
func (d *Device) Func(name string) (uintptr, bool) {
	f, ok := d.fns[name]
	return f, ok
}

// Close waits for the streams and releases everything the Device holds: side streams, kept buffers, the
// staging buffer and the ring, the modules, the streams (the state stream too), the events and the context. Errors are joined;
// what was never made is skipped.
func (d *Device) Close() error {
	dr := d.Drv
	var errs []error
	if d.Stream != 0 {
		errs = append(errs, dr.Check("cuStreamSynchronize", bind.Call(dr.CuStreamSynchronize, d.Stream)))
	}
	if d.CopyStream != 0 {
		errs = append(errs, dr.Check("cuStreamSynchronize(copy)", bind.Call(dr.CuStreamSynchronize, d.CopyStream)))
	}
	errs = append(errs, d.releaseSideStreams(), d.releaseStateStream(), d.releaseKept())
	if d.stage != nil {
		errs = append(errs, dr.Check("cuMemFreeHost", bind.Call(dr.CuMemFreeHost, uintptr(d.stage))))
		d.stage, d.nstg = nil, 0
	}
	for _, m := range d.mods {
		errs = append(errs, dr.Check("cuModuleUnload", bind.Call(dr.CuModuleUnload, m)))
	}
	d.mods, d.fns = nil, map[string]uintptr{}
	if d.Stream != 0 {
		errs = append(errs, dr.Check("cuStreamDestroy", bind.Call(dr.CuStreamDestroy, d.Stream)))
		d.Stream = 0
	}
	if d.CopyStream != 0 {
		errs = append(errs, dr.Check("cuStreamDestroy(copy)", bind.Call(dr.CuStreamDestroy, d.CopyStream)))
		d.CopyStream = 0
	}
	errs = append(errs, d.ring.destroy(dr), d.sync.Destroy(dr))
	if d.Ctx != 0 {
		errs = append(errs, dr.Check("cuDevicePrimaryCtxRelease", bind.Call(dr.CuDevicePrimaryCtxRelease, uintptr(d.Dev))))
		d.Ctx = 0
	}
	return errors.Join(errs...)
}

// Malloc allocates n bytes of device memory, ordered on Stream (0 for n <= 0).
func (d *Device) Malloc(n int) (uint64, error) { return d.malloc(n, d.Stream, "") }

// MallocCopy allocates n bytes of device memory ordered on CopyStream (0 for n <= 0).
func (d *Device) MallocCopy(n int) (uint64, error) { return d.malloc(n, d.CopyStream, ", copy stream") }

func (d *Device) malloc(n int, s uintptr, what string) (uint64, error) {
	if n <= 0 {
		return 0, nil
	}
	var p uint64
	dr := d.Drv
	if d.Async {
		err := dr.Check(fmt.Sprintf("cuMemAllocAsync(%d bytes%s)", n, what), bind.Call(dr.CuMemAllocAsync, uintptr(unsafe.Pointer(&p)), uintptr(n), s))
		return p, err
	}
	err := dr.Check(fmt.Sprintf("cuMemAlloc(%d bytes)", n), bind.Call(dr.CuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n)))
	return p, err
}

// Free releases device memory after the work queued on Stream (0 is a no-op).
func (d *Device) Free(p uint64) error {
	if p == 0 {
		return nil
	}
	dr := d.Drv
	if d.Async {
		return dr.Check("cuMemFreeAsync", bind.Call(dr.CuMemFreeAsync, uintptr(p), d.Stream))
	}
	if err := d.Sync(); err != nil {
		return err
	}
	return dr.Check("cuMemFree", bind.Call(dr.CuMemFree, uintptr(p)))
}

// Sync waits for the work queued on Stream (any asynchronous fault is reported here).
func (d *Device) Sync() error {
	return d.Drv.Check("cuStreamSynchronize", bind.Call(d.Drv.CuStreamSynchronize, d.Stream))
}

// SyncCopy waits for every copy queued on CopyStream.
func (d *Device) SyncCopy() error {
	return d.Drv.Check("cuStreamSynchronize(copy)", bind.Call(d.Drv.CuStreamSynchronize, d.CopyStream))
}
