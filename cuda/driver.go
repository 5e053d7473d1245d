package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// The CUDA driver API, bound at run time through purego (no cgo): libcuda.so.1 is opened with dlopen and
// each function is called through purego.SyscallN with every argument as a uintptr. Every call's CUresult
// goes through check, which names the call. Only the executor goroutine (executor.go) calls these, on its
// locked OS thread with the backend's context current.

// CUDA driver constants used here (cuda.h).
const (
	cuDevAttrMultiprocessorCount    = 16
	cuDevAttrComputeCapabilityMajor = 75
	cuDevAttrComputeCapabilityMinor = 76
	cuDevAttrMaxSharedPerBlockOptin = 97
	cuDevAttrMemoryPoolsSupported   = 115
	cuFuncAttrMaxDynamicSharedBytes = 8
	cuStreamNonBlocking             = 1
	cuMemHostAllocPortable          = 1
	cuMemHostAllocDeviceMap         = 2
	cuMempoolAttrReleaseThreshold   = 4
	cuEventDisableTiming            = 2 // CU_EVENT_DISABLE_TIMING
	cudaSuccess                     = 0
	cudaErrorNotReady               = 600 // CUDA_ERROR_NOT_READY: cuEventQuery's "not yet"
	cuDeviceNameLen                 = 256
	cuLibcudaEnv                    = "POTATO_LIBCUDA"
	cuDefaultLibName                = "libcuda.so.1"
)

// driver holds libcuda's entry points. It is loaded once per process (loadDriver) and never changes after.
type driver struct {
	path string // the library that was opened

	cuInit, cuDriverGetVersion, cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceGetAttribute uintptr
	cuDeviceTotalMem, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease, cuCtxSetCurrent           uintptr
	cuMemAlloc, cuMemFree, cuMemAllocAsync, cuMemFreeAsync, cuMemHostAlloc, cuMemFreeHost            uintptr
	cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync, cuMemsetD32Async                        uintptr
	cuDeviceGetDefaultMemPool, cuMemPoolSetAttribute                                                 uintptr
	cuStreamCreate, cuStreamDestroy, cuStreamSynchronize                                             uintptr
	cuEventCreate, cuEventRecord, cuEventSynchronize, cuEventElapsedTime, cuEventDestroy             uintptr
	cuEventQuery                                                                                     uintptr
	cuStreamWaitEvent                                                                                uintptr
	cuModuleLoadData, cuModuleUnload, cuModuleGetFunction, cuFuncSetAttribute, cuLaunchKernel        uintptr
	cuGetErrorString, cuGetErrorName                                                                 uintptr
	cuFuncGetAttribute                                                                               uintptr
	cuMemGetInfo, cuMemHostGetDevicePointer                                                          uintptr
	version                                                                                          int // cuDriverGetVersion, e.g. 13000
	devices                                                                                          int // cuDeviceGetCount after cuInit
}

var (
	driverOnce sync.Once
	theDriver  *driver
	driverErr  error
)

// loadDriver opens libcuda, resolves every entry point, runs cuInit(0) and counts the devices, once per
// process. The error says which library, symbol or call failed.
func loadDriver() (*driver, error) {
	driverOnce.Do(func() { theDriver, driverErr = openDriver() })
	return theDriver, driverErr
}

// libcudaCandidates lists where libcuda.so.1 is looked for: $POTATO_LIBCUDA first, then the loader's
// search path, then the places container images mount the driver.
func libcudaCandidates() []string {
	var c []string
	if p := os.Getenv(cuLibcudaEnv); p != "" {
		c = append(c, p)
	}
	return append(c, cuDefaultLibName,
		"/usr/local/nvidia/lib64/libcuda.so.1",
		"/usr/lib/x86_64-linux-gnu/libcuda.so.1",
		"/usr/lib64/libcuda.so.1",
		"/usr/local/cuda/compat/libcuda.so.1")
}

// dlopenFirst opens the first library of names that loads; the error lists every failure.
func dlopenFirst(what string, names []string) (uintptr, string, error) {
	var errs []error
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		if filepath.IsAbs(n) {
			if _, err := os.Stat(n); err != nil {
				continue // not there: not worth a line in the error
			}
		}
		h, err := purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, n, nil
		}
		errs = append(errs, err) // dlerror names the file
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("no candidate file exists"))
	}
	return 0, "", fmt.Errorf("%w: %s: %w", ErrUnavailable, what, errors.Join(errs...))
}

// symbols resolves name -> *uintptr in library h (lib names it in errors). A name may list alternatives
// separated by '|', tried in order (versioned entry points first); a name starting with '?' is optional
// (left 0 when missing).
func symbols(lib string, h uintptr, syms map[string]*uintptr) error {
	for names, dst := range syms {
		optional := strings.HasPrefix(names, "?")
		names = strings.TrimPrefix(names, "?")
		var err error
		for _, n := range splitAlternatives(names) {
			var p uintptr
			if p, err = purego.Dlsym(h, n); err == nil && p != 0 {
				*dst = p
				break
			}
		}
		if *dst == 0 && !optional {
			return fmt.Errorf("%w: %s has no symbol %s: %v", ErrUnavailable, lib, names, err)
		}
	}
	return nil
}

func splitAlternatives(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '|' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

func openDriver() (*driver, error) {
	h, path, err := dlopenFirst("the CUDA driver library (libcuda.so.1; set "+cuLibcudaEnv+" to its path)", libcudaCandidates())
	if err != nil {
		return nil, err
	}
	d := &driver{path: path}
	err = symbols(path, h, map[string]*uintptr{
		"cuInit":                                   &d.cuInit,
		"cuDriverGetVersion":                       &d.cuDriverGetVersion,
		"cuDeviceGetCount":                         &d.cuDeviceGetCount,
		"cuDeviceGet":                              &d.cuDeviceGet,
		"cuDeviceGetName":                          &d.cuDeviceGetName,
		"cuDeviceGetAttribute":                     &d.cuDeviceGetAttribute,
		"cuDeviceTotalMem_v2":                      &d.cuDeviceTotalMem,
		"cuDevicePrimaryCtxRetain":                 &d.cuDevicePrimaryCtxRetain,
		"cuDevicePrimaryCtxRelease_v2":             &d.cuDevicePrimaryCtxRelease,
		"cuCtxSetCurrent":                          &d.cuCtxSetCurrent,
		"cuMemAlloc_v2":                            &d.cuMemAlloc,
		"cuMemFree_v2":                             &d.cuMemFree,
		"cuMemHostAlloc":                           &d.cuMemHostAlloc,
		"cuMemFreeHost":                            &d.cuMemFreeHost,
		"cuMemHostGetDevicePointer_v2":             &d.cuMemHostGetDevicePointer,
		"cuMemcpyHtoDAsync_v2":                     &d.cuMemcpyHtoDAsync,
		"cuMemcpyDtoHAsync_v2":                     &d.cuMemcpyDtoHAsync,
		"cuMemcpyDtoDAsync_v2":                     &d.cuMemcpyDtoDAsync,
		"cuMemsetD32Async":                         &d.cuMemsetD32Async,
		"cuMemGetInfo_v2":                          &d.cuMemGetInfo,
		"cuStreamCreate":                           &d.cuStreamCreate,
		"cuStreamDestroy_v2":                       &d.cuStreamDestroy,
		"cuStreamSynchronize":                      &d.cuStreamSynchronize,
		"cuEventCreate":                            &d.cuEventCreate,
		"cuEventRecord":                            &d.cuEventRecord,
		"cuEventSynchronize":                       &d.cuEventSynchronize,
		"cuEventQuery":                             &d.cuEventQuery,
		"cuEventElapsedTime_v2|cuEventElapsedTime": &d.cuEventElapsedTime,
		"cuEventDestroy_v2":                        &d.cuEventDestroy,
		"cuStreamWaitEvent":                        &d.cuStreamWaitEvent,
		"cuModuleLoadData":                         &d.cuModuleLoadData,
		"cuModuleUnload":                           &d.cuModuleUnload,
		"cuModuleGetFunction":                      &d.cuModuleGetFunction,
		"cuFuncSetAttribute":                       &d.cuFuncSetAttribute,
		"cuFuncGetAttribute":                       &d.cuFuncGetAttribute,
		"cuLaunchKernel":                           &d.cuLaunchKernel,
		"cuGetErrorString":                         &d.cuGetErrorString,
		"cuGetErrorName":                           &d.cuGetErrorName,
		"cuMemAllocAsync":                          &d.cuMemAllocAsync,
		"cuMemFreeAsync":                           &d.cuMemFreeAsync,
		"cuDeviceGetDefaultMemPool":                &d.cuDeviceGetDefaultMemPool,
		"cuMemPoolSetAttribute":                    &d.cuMemPoolSetAttribute,
	})
	if err != nil {
		return nil, err
	}
	if err := d.check("cuInit", ccall(d.cuInit, 0)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var v, n int32
	if err := d.check("cuDriverGetVersion", ccall(d.cuDriverGetVersion, uintptr(unsafe.Pointer(&v)))); err != nil {
		return nil, err
	}
	if err := d.check("cuDeviceGetCount", ccall(d.cuDeviceGetCount, uintptr(unsafe.Pointer(&n)))); err != nil {
		return nil, err
	}
	d.version, d.devices = int(v), int(n)
	if n == 0 {
		return nil, fmt.Errorf("%w: %s loaded (driver %s) but reports no CUDA device", ErrUnavailable, path, versionString(d.version))
	}
	return d, nil
}

// ccall invokes a C entry point whose result is a 32-bit enum (CUresult, nvrtcResult) and returns it.
// Pointers converted to uintptr in the call's arguments stay alive and in place for the call.
//
//go:uintptrescapes
func ccall(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return uintptr(uint32(r)) // a C enum is 32 bits; the upper half of the register is undefined
}

// check turns a CUresult into nil or an error naming the call, with the driver's name and description.
func (d *driver) check(name string, rc uintptr) error {
	if rc == cudaSuccess {
		return nil
	}
	return &Error{Call: name, Code: int(rc), Name: d.errorName(rc), Text: d.errorString(rc)}
}

func (d *driver) errorName(rc uintptr) string {
	var p *byte
	if d.cuGetErrorName == 0 || ccall(d.cuGetErrorName, rc, uintptr(unsafe.Pointer(&p))) != 0 || p == nil {
		return "CUDA_ERROR_UNKNOWN_CODE"
	}
	return goString(p)
}

func (d *driver) errorString(rc uintptr) string {
	var p *byte
	if d.cuGetErrorString == 0 || ccall(d.cuGetErrorString, rc, uintptr(unsafe.Pointer(&p))) != 0 || p == nil {
		return "unknown error"
	}
	return goString(p)
}

// goString copies a NUL-terminated C string.
func goString(p *byte) string {
	if p == nil {
		return ""
	}
	var n int
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// cString returns s as a NUL-terminated byte slice (keep it alive across the call that reads it).
func cString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}

// versionString formats a CUDA version number (1000*major + 10*minor) as "major.minor".
func versionString(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// Error is a failed CUDA driver or NVRTC call. errors.Is(err, ErrCUDA) holds for it.
type Error struct {
	Call string // the API function, e.g. "cuLaunchKernel(matmul_bf16)"
	Code int    // its CUresult or nvrtcResult
	Name string // the code's name, e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Text string // the library's description
}

// Error formats the call, the code's name and number, and the description.
func (e *Error) Error() string {
	return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Call, e.Name, e.Code, e.Text)
}

// Is makes errors.Is(err, ErrCUDA) true for every *Error, and errors.Is(err, ops.ErrOutOfMemory) for an
// allocation the device could not satisfy (not a sticky error: the context stays usable).
func (e *Error) Is(target error) bool {
	return target == ErrCUDA || (target == ops.ErrOutOfMemory && e.Name == "CUDA_ERROR_OUT_OF_MEMORY")
}
