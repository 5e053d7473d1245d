// Package cuda is the GPU implementation of ops.Backend: the K3 forward pass of replay/model running on
// an NVIDIA GPU, from Go without cgo. Read DESIGN.md beside this file first (how a layer flows through the
// backend, where memory goes, how bit-exactness is kept); records/JOURNAL.md is the run-by-run journal of
// every kernel version measured on the H200, the removed ones included.
//
// # Using it
//
//	if err := cuda.Available(); err != nil {
//		log.Printf("no GPU (%v): using the CPU backend", err)
//		b = cpu.New(cpu.Options{Precision: ops.BF16})
//	} else {
//		g, err := cuda.New(cuda.Options{Precision: ops.BF16, Device: 0})
//		if err != nil { ... }
//		defer g.Close()
//		b = g
//	}
//	e, _, err := replay.Open(ctx, dir, b, replay.EngineOptions{})
//
// Available says what is missing when there is no GPU (the driver library, a device or NVRTC), so the
// CPU backend stays the fallback. Binaries build with CGO_ENABLED=0 anywhere and find the libraries at
// run time ($POTATO_LIBCUDA, $POTATO_NVRTC and $POTATO_CUBLASLT name them when they are not on the
// loader's path). libcublasLt is optional: without it the bfloat16 matmuls run on the package's own
// kernel and DeviceInfo.CuBLASLtMissing says why (Options.CuBLASLt: CuBLASLtRequire makes it an error).
//
// # Layers
//
// Three packages, imports one way (each knows nothing of the one above it):
//
//   - cuda/bind: the run-time bindings of libcuda (the driver API), libnvrtc and libcublasLt through
//     purego, the only code that touches it. Entry points are uintptr fields called through bind.Call;
//     every result code is checked into an *Error naming the call (ErrCUDA). No knowledge of K3 or ops.
//   - cuda/device: the machinery a backend runs on one GPU: the CUDA thread (a CUDA context is current
//     per OS thread, so every call runs on one locked goroutine: device.Thread, which also turns a panic
//     into ErrInternal), the context and its two streams (compute and copy), stream-ordered device
//     memory from the device's pool, the pinned staging buffer, the upload ring for small op inputs,
//     kept scratch buffers, side streams, event pools, the kernel modules and the NVRTC kernel cache on
//     disk. No knowledge of K3 or ops either.
//   - cuda (this package): the backend. An op validates its arguments on the caller's goroutine, then
//     runs one closure on the CUDA thread (Backend.run, launch.go) that allocates, uploads, launches the
//     kernels of kernels/*.cu and frees its temporaries; op timing (ops.OpProfiler) brackets that closure
//     with events. One file per op family, with the kernel file it launches: kda.go (ShortConvSiLU, KDA;
//     kda.cu), mla.go and mla_tc.go (MLA; mla.cu, mla_tc.cu, mla_wg.cu on sm_90a's wgmma, what the last two
//     share in mla.cuh), norm.go and mixnorm.go (RMSNorm, GatedRMSNorm, AttnResMix, AttnResMixNorm;
//     norm.cu), matmul.go (MatMul; matmul.cu, matmul_tc.cu, cuBLASLt through cublaslt.go and
//     cublaslt_plan.go), route.go (Route; route.cu), route_queued.go (QueueRoute: the same kernels, the choices
//     copied out on the stream), moe.go, experts*.go (UploadExpert, UploadExperts,
//     ExpertsAccumulate; experts.cu, experts_wg.cu and the decoders they share in experts.cuh; the wgmma
//     helpers of experts_wg.cu and mla_wg.cu in wgmma.cuh), ffn.go
//     (SiTUFFN), logits.go (TokenStats; tokenstats.cu), tensor.go (tensors and the elementwise ops;
//     elementwise.cu, convert.cu), host.go and stable.go (pinned host memory for the engine, asynchronous
//     expert uploads).
//
// Each .cu file opens with the kernels it holds, the shapes each covers and its H200 figures, and names
// the versions that were removed; each op's doc comment states the loop it computes, the contract its
// kernels meet. Kernels are compiled by NVRTC at New for the device (sm_90a on an H100 or H200) with
// --fmad=false and without fast math, and cached on disk by a hash of everything that changes them
// (potato-k3/cuda under the user cache directory, or $POTATO_CUDA_CACHE).
//
// # Errors
//
// Every error wraps one of the package's sentinels or is an *Error (a failed CUDA call, matching
// ErrCUDA); an allocation the device cannot satisfy also matches ops.ErrOutOfMemory, and the engine then
// runs the wave as smaller waves. Shape and argument errors are ops.ErrShape and ops.ErrArgument, as in
// every backend.
//
// # Sizes
//
// A tensor holds up to 2^34 elements (64 GiB of float32; MaxElements, ops.ElementLimit), with fewer than
// 2^31 rows and columns. Every kernel indexes elements with 64-bit integers, and launch checks each grid
// against the device's limits, so a wave of 65,536 K3 tokens (3.2e9 elements at the routed experts'
// widest activation) runs as one wave.
package cuda
