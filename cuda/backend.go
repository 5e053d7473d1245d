package cuda

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/cuda/device"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Sentinels for errors.Is; every error the backend returns wraps one of them (or is an *Error, which
// matches ErrCUDA).
var (
	// ErrUnavailable marks a missing driver library, NVRTC library or device (Available says which).
	ErrUnavailable = bind.ErrUnavailable
	// ErrCUDA marks a failed CUDA driver, NVRTC or cuBLASLt call (*Error carries the call and code).
	ErrCUDA = bind.ErrCUDA
	// ErrCompile marks a kernel that NVRTC could not compile (the message carries its log).
	ErrCompile = bind.ErrCompile
	// ErrShape marks an op called with shapes it cannot combine (the message names the op and the shapes).
	// It is ops.ErrShape: the checks shared by every backend (ops.CheckKDA, ...) return it too.
	ErrShape = ops.ErrShape
	// ErrArgument marks another bad argument: a foreign tensor, an id out of range, a bad MXFP4 scale.
	// It is ops.ErrArgument, like ErrShape.
	ErrArgument = ops.ErrArgument
	// ErrFreed marks the use of a tensor or expert after Free.
	ErrFreed = errors.New("cuda: use after free")
	// ErrClosed marks a call on a closed Backend.
	ErrClosed = device.ErrClosed
	// ErrInternal marks a bug in this package (a recovered panic on the CUDA thread).
	ErrInternal = device.ErrInternal
)

// Error is a failed CUDA driver, NVRTC or cuBLASLt call (cuda/bind). errors.Is(err, ErrCUDA) holds for
// it, and errors.Is(err, ops.ErrOutOfMemory) for an allocation the device could not satisfy, once an op
// returns it (opError).
type Error = bind.Error

// opError marks an error that holds a failed allocation (bind.ErrOutOfMemory) as ops.ErrOutOfMemory too,
// which the engine answers by running the wave as smaller waves; cuda/bind knows nothing of ops.
type opError struct{ err error }

func (e opError) Error() string { return e.err.Error() }
func (e opError) Unwrap() error { return e.err }

// Is matches ops.ErrOutOfMemory.
func (e opError) Is(target error) bool { return target == ops.ErrOutOfMemory }

// withOOM returns err, marked as ops.ErrOutOfMemory where it holds a failed allocation.
func withOOM(err error) error {
	if err != nil && errors.Is(err, bind.ErrOutOfMemory) {
		return opError{err}
	}
	return err
}

// Environment variables read by this package.
const (
	// archEnv overrides the NVRTC target (e.g. "sm_90" or "compute_90"); by default it comes from the
	// device's compute capability (sm_90a on an H100 or H200).
	archEnv = "POTATO_CUDA_ARCH"
)

// Options configure a Backend.
type Options struct {
	// Precision is where activations are rounded: ops.BF16 (the reference points) or ops.FP32 (nowhere).
	Precision ops.Precision
	// Device is the CUDA device ordinal.
	Device int
	// Sync makes every op wait for its kernels, so that an asynchronous fault is reported by the op that
	// caused it (for debugging; slower).
	Sync bool
	// CacheDir overrides the kernel cache directory ($POTATO_CUDA_CACHE, else the user cache directory).
	CacheDir string
	// NoTensorCores keeps every matmul on the CUDA cores (kernel version 1): bit-identical to the CPU
	// backend in both precisions, and much slower. By default BF16 precision runs the matmuls with bfloat16
	// or MXFP4 weights on the tensor cores (cuBLASLt or version 2), batch invariant as well.
	NoTensorCores bool
	// CuBLASLt selects where the matmuls of BF16 precision with a bfloat16 weight run: by default on
	// cuBLASLt with an algorithm pinned per weight shape when the library loads (cublaslt_plan.go), else on
	// the project's tensor-core kernel; the routed experts' GEMMs too, over weights decoded to bfloat16
	// (experts_lt.go), where both of their shapes get a pinned algorithm. FP32 precision and the router
	// never use it.
	CuBLASLt CuBLASLtMode
	// ExpertStreams is the number of streams the routed experts' GEMMs are spread over on the cuBLASLt
	// path (experts_lt_lanes.go): 0 for the default (ltExpertStreams), 1 for the compute stream alone.
	// Results are the same bits for every value; only the speed changes.
	ExpertStreams int
	// EagerRounding makes MatMul (on cuBLASLt) and the fused SiTUFFN round their outputs in place before
	// returning them, as they did before deferred rounding (deferred.go): the same bits, one more pass
	// over each output. For tests that compare the two, and as a fallback.
	EagerRounding bool
	// EagerWidening makes RMSNorm, GatedRMSNorm and MulSigmoid write their float32 outputs beside the
	// bfloat16 copies the next matmuls read, as they did before narrow-only outputs (narrow.go): the same
	// bits, one more write of each output. For tests that compare the two, and as a fallback.
	EagerWidening bool
	// UnfusedMixNorm makes AttnResMixNorm run AttnResMix and RMSNorm one after the other instead of its
	// fused kernel (mixnorm.go): the same bits, the mix written and read back. For tests and comparisons.
	UnfusedMixNorm bool
	// MLAMmaSync keeps MLA's attention in BF16 precision on mla_tc.cu's mma.sync kernel where an sm_90a
	// device would run mla_wg.cu's wgmma kernel (the default there): for comparisons and as a fallback.
	// Both give the same bits (TestMLAWGAgainstMmaSync); only the speed differs.
	MLAMmaSync bool
	// MLAPrefixRows is the most rows of a long sequence's earlier keys that a slice's MLA expands at once
	// (slice_mla.go; 0: 16,384), a multiple of 64. Results are the same bits for every value; tests take
	// it small to cross many parts.
	MLAPrefixRows int
	// MLAExpandedKeys keeps MLA's keys and values expanded by kv_b_proj's MatMul in float32 and copied to
	// bfloat16 by k_mla_prep, as before mla_latent.go (ops.LatentKeys answers false): for comparisons.
	MLAExpandedKeys bool
}

// CuBLASLtMode is Options.CuBLASLt.
type CuBLASLtMode int

const (
	// CuBLASLtAuto uses cuBLASLt when libcublasLt loads; without it the backend works as with
	// CuBLASLtOff and DeviceInfo.CuBLASLtMissing says why.
	CuBLASLtAuto CuBLASLtMode = iota
	// CuBLASLtOff keeps the bfloat16 matmuls on the project's tensor-core kernel (matmul_tc.cu).
	CuBLASLtOff
	// CuBLASLtRequire is CuBLASLtAuto, but New fails (ErrUnavailable) when libcublasLt cannot be used.
	CuBLASLtRequire
)

// DeviceInfo describes the device a Backend runs on.
type DeviceInfo struct {
	Name             string
	Ordinal          int
	Major, Minor     int    // compute capability
	Arch             string // the NVRTC target the kernels were built for
	Multiprocessors  int
	TotalMemory      int64
	MaxSharedOptin   int // bytes of shared memory a block may use after opting in
	Driver           string
	DriverLib, NVRTC string // the libraries that were opened
	NVRTCVersion     string
	KernelsCompiled  int // kernel files NVRTC compiled at New
	KernelsCached    int // kernel files read from the disk cache at New
	// CuBLASLt is the libcublasLt the bfloat16 matmuls run on, and CuBLASLtVersion its version; both
	// empty when they do not use it (CuBLASLtOff, FP32 precision, NoTensorCores, or no library).
	CuBLASLt, CuBLASLtVersion string
	// CuBLASLtMissing says why cuBLASLt is not used under CuBLASLtAuto ("" when it is, or was not asked).
	CuBLASLtMissing string
}

// Backend is the CUDA implementation of ops.Backend. It is safe for concurrent use: every call runs on
// its one CUDA thread, in order. A tensor must not be freed while another call uses it. Close releases
// the device; tensors of a closed backend are gone.
type Backend struct {
	prec  ops.Precision
	bf    int32 // 1 in BF16 precision: kernels round at the contract's points
	opts  Options
	drv   *bind.Driver
	ex    *device.Thread // the CUDA thread: every call below runs on it
	info  DeviceInfo
	cudev int32 // CUdevice
	async bool  // stream-ordered allocation (cuMemAllocAsync) is available
	// dv is the context, streams, device memory, staging buffer, upload ring, kept buffers, side streams
	// and kernels (cuda/device); made by start on the CUDA thread
	dv   *device.Device
	evs  copyEvents // events of the asynchronous expert uploads (stable.go); on the CUDA thread
	prof opProfile  // op timing (profile.go); on the CUDA thread
	// situTabs are SiTU's factor tables by (beta, linBeta) (ffn.go); on the CUDA thread
	situTabs map[situKey]uint64
	// latentKeys are MLAFromLatent's answers by head sizes (mla_latent.go); on the CUDA thread
	latentKeys map[latentKey]latentPlan
	// Test knobs, zero for the defaults: the bytes of decoded weights of one chunk of the cuBLASLt expert
	// path (ltDecodeBytes), the rows of one of its GEMM blocks (ltExpertRows) and the rows of one block of
	// the fused FFN (ffnBlockRows).
	decodeBytes, expertRows, ffnRows int
	// normVer 1 makes RMSNorm, GatedRMSNorm and AttnResMix launch norm.cu's general kernels where the
	// 16-byte ones fit (tests and timing compare the two); mixForm, when set, is the fused mix and norm's
	// form for every vector count (mixNormForm).
	normVer int
	mixForm string
	// gateLate makes the gated norm load its gate after the sums, as k_rmsnorm2 does (gatedKernel):
	// TestGatedRMSNormGateEarly compares the two forms' bits
	gateLate bool

	hosts  hostAllocs // pinned buffers handed out by AllocHost
	routes routeHost  // the pinned buffer of queued routings (route_queued.go)
	lt     *ltHandle  // cuBLASLt for the bfloat16 matmuls, nil when not used (matmul.go gemm)

	closeOnce sync.Once
	closeErr  error
}

var _ ops.Backend = (*Backend)(nil)

// Available reports whether a CUDA backend can be made on this machine: nil, or an error wrapping
// ErrUnavailable that says what is missing (the driver library, a device, or NVRTC).
func Available() error {
	if _, err := bind.LoadDriver(); err != nil {
		return err
	}
	_, err := bind.LoadNVRTC()
	return err
}

// New makes a backend on device o.Device: it loads the driver and NVRTC, compiles the kernels for the
// device's architecture (or reads them from the disk cache), and starts the CUDA thread with the
// device's primary context current. Close releases it.
func New(o Options) (*Backend, error) {
	drv, err := bind.LoadDriver()
	if err != nil {
		return nil, err
	}
	nv, err := bind.LoadNVRTC()
	if err != nil {
		return nil, err
	}
	if o.ExpertStreams < 0 || o.ExpertStreams > maxExpertStreams {
		return nil, fmt.Errorf("%w: ExpertStreams %d: want 0 (the default) to %d", ErrArgument, o.ExpertStreams, maxExpertStreams)
	}
	if o.MLAPrefixRows < 0 || o.MLAPrefixRows%mlaKeyBlock != 0 {
		return nil, fmt.Errorf("%w: MLAPrefixRows %d: want 0 (the default) or a positive multiple of %d", ErrArgument, o.MLAPrefixRows, mlaKeyBlock)
	}
	if o.Device < 0 || o.Device >= drv.Devices {
		return nil, fmt.Errorf("%w: device %d: %d CUDA devices present", ErrArgument, o.Device, drv.Devices)
	}
	b := &Backend{prec: o.Precision, opts: o, drv: drv,
		evs:  copyEvents{events: device.EventPool{Flags: bind.EventDisableTiming, What: "copy"}},
		prof: opProfile{events: device.EventPool{What: "timing"}}}
	if o.Precision == ops.BF16 {
		b.bf = 1
	}
	if err := b.queryDevice(nv); err != nil {
		return nil, err
	}
	images, err := b.compileKernels(nv)
	if err != nil {
		return nil, err
	}
	var lt *bind.CuBLASLt
	if o.CuBLASLt != CuBLASLtOff && o.Precision == ops.BF16 && !o.NoTensorCores {
		if lt, err = bind.LoadCuBLASLt(); err != nil {
			if o.CuBLASLt == CuBLASLtRequire {
				return nil, fmt.Errorf("cuda: Options.CuBLASLt is CuBLASLtRequire: %w", err)
			}
			b.info.CuBLASLtMissing = err.Error()
		}
	}
	b.ex, err = device.NewThread(func() error { return b.start(images, lt) })
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d (%s): %w", o.Device, b.info.Name, err)
	}
	return b, nil
}

// queryDevice fills b.info (attributes need cuInit only, no context).
func (b *Backend) queryDevice(nv *bind.NVRTC) error {
	d := b.drv
	if err := d.Check("cuDeviceGet", bind.Call(d.CuDeviceGet, uintptr(unsafe.Pointer(&b.cudev)), uintptr(b.opts.Device))); err != nil {
		return err
	}
	attr := func(a int) (int, error) {
		var v int32
		err := d.Check(fmt.Sprintf("cuDeviceGetAttribute(%d)", a), bind.Call(d.CuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(b.cudev)))
		return int(v), err
	}
	var err error
	info := &b.info
	info.Ordinal = b.opts.Device
	name := make([]byte, bind.DeviceNameLen)
	if err = d.Check("cuDeviceGetName", bind.Call(d.CuDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(b.cudev))); err != nil {
		return err
	}
	info.Name = bind.GoString(&name[0])
	if info.Major, err = attr(bind.DevAttrComputeCapabilityMajor); err != nil {
		return err
	}
	if info.Minor, err = attr(bind.DevAttrComputeCapabilityMinor); err != nil {
		return err
	}
	if info.Multiprocessors, err = attr(bind.DevAttrMultiprocessorCount); err != nil {
		return err
	}
	if info.MaxSharedOptin, err = attr(bind.DevAttrMaxSharedPerBlockOptin); err != nil {
		return err
	}
	pools, err := attr(bind.DevAttrMemoryPoolsSupported)
	if err != nil {
		return err
	}
	b.async = pools != 0 && d.CuMemAllocAsync != 0 && d.CuMemFreeAsync != 0 && d.CuDeviceGetDefaultMemPool != 0 && d.CuMemPoolSetAttribute != 0
	var total uintptr
	if err := d.Check("cuDeviceTotalMem", bind.Call(d.CuDeviceTotalMem, uintptr(unsafe.Pointer(&total)), uintptr(b.cudev))); err != nil {
		return err
	}
	info.TotalMemory = int64(total)
	info.Driver = bind.VersionString(d.Version)
	info.DriverLib, info.NVRTC = d.Path, nv.Path
	info.NVRTCVersion = fmt.Sprintf("%d.%d", nv.Major, nv.Minor)
	info.Arch = archFor(info.Major, info.Minor)
	if a := os.Getenv(archEnv); a != "" {
		info.Arch = a
	}
	return nil
}

// archFor is the NVRTC target for a compute capability: sm_90a on Hopper (the "a" target admits wgmma
// and setmaxnreg for later kernel versions), sm_XY elsewhere.
func archFor(major, minor int) string {
	if major == 9 && minor == 0 {
		return "sm_90a"
	}
	return fmt.Sprintf("sm_%d%d", major, minor)
}

// start runs on the CUDA thread: it opens the device (the primary context made current, the streams,
// the memory pool keeping freed memory cached), loads the kernel modules and, given lt, creates the
// cuBLASLt handle.
func (b *Backend) start(images map[string][]byte, lt *bind.CuBLASLt) error {
	d := b.drv
	dv, err := device.Open(d, b.cudev, b.async)
	if err != nil {
		return err
	}
	b.dv = dv
	mods := make([]device.Module, len(kernelFiles))
	for i, kf := range kernelFiles {
		mods[i] = device.Module{Name: kf.file, Image: images[kf.file], Kernels: kf.loaded()}
	}
	if err := dv.Load(mods); err != nil {
		b.release()
		return err
	}
	// Kernels with more than 48 KiB of dynamic shared memory must opt in.
	large := []string{"k_kda_exact", "k_mla", "k_kda_chunk_r128", "k_kda_chunk_r64", "k_kda_chunk_r128n", "k_kda_chunk_r64n"}
	if devKernels {
		large = append(large, "k_kda_chunk_prof_r128")
	}
	for _, k := range large {
		if err := d.Check("cuFuncSetAttribute("+k+", max dynamic shared memory)",
			bind.Call(d.CuFuncSetAttribute, b.fn(k), bind.FuncAttrMaxDynamicSharedBytes, uintptr(b.info.MaxSharedOptin))); err != nil {
			b.release()
			return err
		}
	}
	if lt != nil {
		h, err := newLtHandle(lt)
		if err == nil {
			if err = d.Check("cuMemAlloc(cuBLASLt workspace)", bind.Call(d.CuMemAlloc, uintptr(unsafe.Pointer(&h.ws)), ltWorkspaceAlloc)); err != nil {
				err = errors.Join(err, h.close())
			}
		}
		switch {
		case err == nil:
			b.lt = h
			b.info.CuBLASLt, b.info.CuBLASLtVersion = lt.Path, lt.VersionString()
		case b.opts.CuBLASLt == CuBLASLtRequire:
			b.release()
			return fmt.Errorf("%w: %s: %w", ErrUnavailable, lt.Path, err)
		default:
			b.info.CuBLASLtMissing = fmt.Sprintf("%s: %v", lt.Path, err)
		}
	}
	return nil
}

// fn is the loaded kernel name (0 when there is none: a launch then fails naming it).
func (b *Backend) fn(name string) uintptr {
	f, _ := b.dv.Func(name)
	return f
}

// release undoes start (on the CUDA thread); errors are joined.
func (b *Backend) release() error {
	if b.dv == nil {
		return nil
	}
	d := b.drv
	errs := []error{b.dv.SyncStreams(), b.releaseHosts(), b.releaseRouteBuffer(true), b.releaseSiTUTables()} // side streams too: they may read the tables
	if b.lt != nil {
		if b.lt.ws != 0 {
			errs = append(errs, d.Check("cuMemFree(cuBLASLt workspace)", bind.Call(d.CuMemFree, uintptr(b.lt.ws))))
		}
		errs = append(errs, b.lt.close())
		b.lt = nil
	}
	errs = append(errs, b.evs.destroy(d), b.prof.destroy(d), b.dv.Close())
	b.dv = nil
	return errors.Join(errs...)
}

// Close waits for the device, releases the stream, modules and context, and stops the CUDA thread.
// Tensors not freed are released with the context's memory only when no other backend holds it. A second
// Close is a no-op.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		if b.ex != nil {
			b.closeErr = b.ex.Close(b.release)
		}
	})
	return b.closeErr
}

// Name returns "cuda".
func (b *Backend) Name() string { return "cuda" }

// Precision returns the rounding mode the backend was made with.
func (b *Backend) Precision() ops.Precision { return b.prec }

// Device describes the device and how the kernels were built.
func (b *Backend) Device() DeviceInfo { return b.info }

// Synchronize waits until every op issued so far has finished on the device and reports any fault.
func (b *Backend) Synchronize() error {
	return b.ex.Do(func() error {
		return b.drv.Check("cuStreamSynchronize", bind.Call(b.drv.CuStreamSynchronize, b.dv.Stream))
	})
}

// MemInfo returns the device's free and total memory in bytes.
func (b *Backend) MemInfo() (free, total int64, err error) {
	err = b.ex.Do(func() error {
		var f, t uintptr
		err := b.drv.Check("cuMemGetInfo", bind.Call(b.drv.CuMemGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t))))
		free, total = int64(f), int64(t)
		return err
	})
	return free, total, err
}
