package bind

import (
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// The CUDA driver API, bound at run time through purego (no cgo): libcuda.so.1 is opened with dlopen and
// each function is called through purego.SyscallN (Call) with every argument as a uintptr. Every call's
// CUresult goes through Check, which names the call. A CUDA context is current per OS thread: the caller
// makes every call on the thread where its context is current.

// Driver constants used by the packages above (cuda.h).
const (
	DevAttrMultiprocessorCount    = 16
	DevAttrComputeCapabilityMajor = 75
	DevAttrComputeCapabilityMinor = 76
	DevAttrMaxSharedPerBlockOptin = 97
	DevAttrMemoryPoolsSupported   = 115
	FuncAttrMaxDynamicSharedBytes = 8
	StreamNonBlocking             = 1
	MemHostAllocPortable          = 1
	MemHostAllocDeviceMap         = 2
	MempoolAttrReleaseThreshold   = 4
	MempoolAttrReservedMemCurrent = 5 // CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: bytes the pool holds from the device
	MempoolAttrReservedMemHigh    = 6 // CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: the most it held since reset (settable to 0)
	MempoolAttrUsedMemCurrent     = 7 // CU_MEMPOOL_ATTR_USED_MEM_CURRENT: bytes of it allocated now
	MempoolAttrUsedMemHigh        = 8 // CU_MEMPOOL_ATTR_USED_MEM_HIGH: the most allocated since reset (settable to 0)
	EventDisableTiming            = 2 // CU_EVENT_DISABLE_TIMING
	Success                       = 0
	ErrorNotReady                 = 600 // CUDA_ERROR_NOT_READY: cuEventQuery's "not yet"
	DeviceNameLen                 = 256
	libcudaEnv                    = "POTATO_LIBCUDA"
	libcudaName                   = "libcuda.so.1"
)

// Driver holds libcuda's entry points, each named after its C function (cuMemAlloc_v2 is CuMemAlloc) and
// called through Call with every argument as a uintptr. It is loaded once per process (LoadDriver) and
// never changes after.
type Driver struct {
	Path string // the library that was opened

	CuInit, CuDriverGetVersion, CuDeviceGetCount, CuDeviceGet, CuDeviceGetName, CuDeviceGetAttribute uintptr
	CuDeviceTotalMem, CuDevicePrimaryCtxRetain, CuDevicePrimaryCtxRelease, CuCtxSetCurrent           uintptr
	CuMemAlloc, CuMemFree, CuMemAllocAsync, CuMemFreeAsync, CuMemHostAlloc, CuMemFreeHost            uintptr
	CuMemcpyHtoDAsync, CuMemcpyDtoHAsync, CuMemcpyDtoDAsync, CuMemsetD32Async                        uintptr
	CuDeviceGetDefaultMemPool, CuMemPoolSetAttribute, CuMemPoolGetAttribute                          uintptr
	CuStreamCreate, CuStreamDestroy, CuStreamSynchronize                                             uintptr
	CuEventCreate, CuEventRecord, CuEventSynchronize, CuEventElapsedTime, CuEventDestroy             uintptr
	CuEventQuery                                                                                     uintptr
	CuStreamWaitEvent                                                                                uintptr
	CuModuleLoadData, CuModuleUnload, CuModuleGetFunction, CuFuncSetAttribute, CuLaunchKernel        uintptr
	CuGetErrorString, CuGetErrorName                                                                 uintptr
	CuFuncGetAttribute                                                                               uintptr
	CuMemGetInfo, CuMemHostGetDevicePointer                                                          uintptr
	Version                                                                                          int // cuDriverGetVersion, e.g. 13000
	Devices                                                                                          int // cuDeviceGetCount after cuInit
}

var (
	driverOnce sync.Once
	theDriver  *Driver
	driverErr  error
)

// LoadDriver opens libcuda ($POTATO_LIBCUDA, the loader's path, then where container images mount it),
// resolves every entry point, runs cuInit(0) and counts the devices, once per process. The error wraps
// ErrUnavailable and says which library, symbol or call failed.
func LoadDriver() (*Driver, error) {
	driverOnce.Do(func() { theDriver, driverErr = openDriver() })
	return theDriver, driverErr
}

// libcudaCandidates lists where libcuda.so.1 is looked for: $POTATO_LIBCUDA first, then the loader's
// search path, then the places container images mount the driver.
func libcudaCandidates() []string {
	var c []string
	if p := os.Getenv(libcudaEnv); p != "" {
		c = append(c, p)
	}
	return append(c, libcudaName,
		"/usr/local/nvidia/lib64/libcuda.so.1",
		"/usr/lib/x86_64-linux-gnu/libcuda.so.1",
		"/usr/lib64/libcuda.so.1",
		"/usr/local/cuda/compat/libcuda.so.1")
}

func openDriver() (*Driver, error) {
	h, path, err := dlopenFirst("the CUDA driver library (libcuda.so.1; set "+libcudaEnv+" to its path)", libcudaCandidates())
	if err != nil {
		return nil, err
	}
	d := &Driver{Path: path}
	err = symbols(path, h, map[string]*uintptr{
		"cuInit":                                   &d.CuInit,
		"cuDriverGetVersion":                       &d.CuDriverGetVersion,
		"cuDeviceGetCount":                         &d.CuDeviceGetCount,
		"cuDeviceGet":                              &d.CuDeviceGet,
		"cuDeviceGetName":                          &d.CuDeviceGetName,
		"cuDeviceGetAttribute":                     &d.CuDeviceGetAttribute,
		"cuDeviceTotalMem_v2":                      &d.CuDeviceTotalMem,
		"cuDevicePrimaryCtxRetain":                 &d.CuDevicePrimaryCtxRetain,
		"cuDevicePrimaryCtxRelease_v2":             &d.CuDevicePrimaryCtxRelease,
		"cuCtxSetCurrent":                          &d.CuCtxSetCurrent,
		"cuMemAlloc_v2":                            &d.CuMemAlloc,
		"cuMemFree_v2":                             &d.CuMemFree,
		"cuMemHostAlloc":                           &d.CuMemHostAlloc,
		"cuMemFreeHost":                            &d.CuMemFreeHost,
		"cuMemHostGetDevicePointer_v2":             &d.CuMemHostGetDevicePointer,
		"cuMemcpyHtoDAsync_v2":                     &d.CuMemcpyHtoDAsync,
		"cuMemcpyDtoHAsync_v2":                     &d.CuMemcpyDtoHAsync,
		"cuMemcpyDtoDAsync_v2":                     &d.CuMemcpyDtoDAsync,
		"cuMemsetD32Async":                         &d.CuMemsetD32Async,
		"cuMemGetInfo_v2":                          &d.CuMemGetInfo,
		"cuStreamCreate":                           &d.CuStreamCreate,
		"cuStreamDestroy_v2":                       &d.CuStreamDestroy,
		"cuStreamSynchronize":                      &d.CuStreamSynchronize,
		"cuEventCreate":                            &d.CuEventCreate,
		"cuEventRecord":                            &d.CuEventRecord,
		"cuEventSynchronize":                       &d.CuEventSynchronize,
		"cuEventQuery":                             &d.CuEventQuery,
		"cuEventElapsedTime_v2|cuEventElapsedTime": &d.CuEventElapsedTime,
		"cuEventDestroy_v2":                        &d.CuEventDestroy,
		"cuStreamWaitEvent":                        &d.CuStreamWaitEvent,
		"cuModuleLoadData":                         &d.CuModuleLoadData,
		"cuModuleUnload":                           &d.CuModuleUnload,
		"cuModuleGetFunction":                      &d.CuModuleGetFunction,
		"cuFuncSetAttribute":                       &d.CuFuncSetAttribute,
		"cuFuncGetAttribute":                       &d.CuFuncGetAttribute,
		"cuLaunchKernel":                           &d.CuLaunchKernel,
		"cuGetErrorString":                         &d.CuGetErrorString,
		"cuGetErrorName":                           &d.CuGetErrorName,
		"cuMemAllocAsync":                          &d.CuMemAllocAsync,
		"cuMemFreeAsync":                           &d.CuMemFreeAsync,
		"cuDeviceGetDefaultMemPool":                &d.CuDeviceGetDefaultMemPool,
		"cuMemPoolSetAttribute":                    &d.CuMemPoolSetAttribute,
		"cuMemPoolGetAttribute":                    &d.CuMemPoolGetAttribute,
	})
	if err != nil {
		return nil, err
	}
	if err := d.Check("cuInit", Call(d.CuInit, 0)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var v, n int32
	if err := d.Check("cuDriverGetVersion", Call(d.CuDriverGetVersion, uintptr(unsafe.Pointer(&v)))); err != nil {
		return nil, err
	}
	if err := d.Check("cuDeviceGetCount", Call(d.CuDeviceGetCount, uintptr(unsafe.Pointer(&n)))); err != nil {
		return nil, err
	}
	d.Version, d.Devices = int(v), int(n)
	if n == 0 {
		return nil, fmt.Errorf("%w: %s loaded (driver %s) but reports no CUDA device", ErrUnavailable, path, VersionString(d.Version))
	}
	return d, nil
}

// Check turns a CUresult into nil or an error naming the call, with the driver's name and description.
func (d *Driver) Check(name string, rc uintptr) error {
	if rc == Success {
		return nil
	}
	return &Error{Call: name, Code: int(rc), Name: d.errorName(rc), Text: d.errorString(rc)}
}

func (d *Driver) errorName(rc uintptr) string {
	var p *byte
	if d.CuGetErrorName == 0 || Call(d.CuGetErrorName, rc, uintptr(unsafe.Pointer(&p))) != 0 || p == nil {
		return "CUDA_ERROR_UNKNOWN_CODE"
	}
	return GoString(p)
}

func (d *Driver) errorString(rc uintptr) string {
	var p *byte
	if d.CuGetErrorString == 0 || Call(d.CuGetErrorString, rc, uintptr(unsafe.Pointer(&p))) != 0 || p == nil {
		return "unknown error"
	}
	return GoString(p)
}
