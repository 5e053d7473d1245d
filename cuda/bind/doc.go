// Package bind is the run-time binding of the three NVIDIA libraries the GPU backend uses, from Go without
// cgo: libcuda.so.1 (the driver API: Driver, LoadDriver), libnvrtc (run-time compilation of CUDA C++:
// NVRTC, LoadNVRTC, Build) and libcublasLt (CuBLASLt, LoadCuBLASLt). It is the only code of the project
// that touches github.com/ebitengine/purego; it knows nothing of K3, of the ops interface or of how the
// layers above use the calls.
//
// Each library is opened once per process with dlopen, from an environment variable's path first
// ($POTATO_LIBCUDA, $POTATO_NVRTC, $POTATO_CUBLASLT), then the loader's path and the places CUDA toolkits,
// container images and NVIDIA's Python wheels install them; a missing library or symbol is an error
// wrapping ErrUnavailable that lists where it looked. The entry points are uintptr fields named after
// their C functions, called through Call with every argument as a uintptr (Go pointers passed as
// uintptr(unsafe.Pointer(p)) in the call's argument list stay alive and in place for the call). Every
// result code goes through a Check method that turns a failure into an *Error naming the call, which
// matches ErrCUDA (and ErrOutOfMemory for a failed allocation) with errors.Is.
//
//	d, err := bind.LoadDriver()
//	if err != nil {
//		return err // wraps bind.ErrUnavailable: no libcuda, or no device
//	}
//	var v int32
//	err = d.Check("cuDriverGetVersion", bind.Call(d.CuDriverGetVersion, uintptr(unsafe.Pointer(&v))))
//
// A CUDA context is current per OS thread: the caller makes every call with a context on the thread where
// it is current (cuda/device runs them on one locked thread).
package bind
