// Package cuda is the GPU implementation of ops.Backend: the K3 forward pass of replay/model running on
// an NVIDIA GPU, from Go without cgo.
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
// run time.
//
// # How it is built
//
// Bindings: libcuda.so.1 (the driver API) and libnvrtc.so.13 (run-time compilation) are opened with
// dlopen through github.com/ebitengine/purego (driver.go, nvrtc.go); every call's return code is checked
// and a failure is an *Error naming the call (errors.Is(err, ErrCUDA)). $POTATO_LIBCUDA and
// $POTATO_NVRTC name the libraries when they are not on the loader's path.
//
// Kernels: the .cu files under kernels/ are embedded with go:embed and compiled by NVRTC at New for the
// device's compute capability (sm_90a on an H100 or H200), with --fmad=false and without fast math. The
// machine code is cached under the user cache directory (potato-k3/cuda, or $POTATO_CUDA_CACHE), keyed by
// the SHA-256 of the source and its header, the options, the NVRTC version and the architecture, so a
// second start loads it in milliseconds. Each .cu file opens with its list of versions and why; the Go
// file that launches a kernel documents its launch shape.
//
// Threads: a CUDA context is current per OS thread, so every CUDA call of a Backend runs on one
// goroutine locked to its thread (executor.go): an op validates its arguments, then submits one closure
// and waits. A panic on that thread is recovered and returned as an error wrapping ErrInternal.
//
// Memory: tensors live in device memory, allocated stream-ordered (cuMemAllocAsync) from the device's
// pool; activations are float32 (bfloat16 values in BF16 precision), weights stay as uploaded (raw
// bfloat16 or float32, no host decoding), and routed experts stay MXFP4-packed and are decoded inside the
// matmul kernel as it stages each tile. Weights are copied on a second stream, straight from the caller's
// bytes when they lie in pinned memory from AllocHost (the engine reads the checkpoint into such buffers:
// ops.HostMemory), else through a pinned staging buffer; the other host transfers use the staging buffer.
//
// # Numerics
//
// Each op computes the loop its ops.Backend doc comment states, with every reduction in a fixed order
// that depends on the shapes of one sequence only, never on the number of rows, the other sequences of
// the wave, the grid or the block that runs it: a sequence's results are bit-identical alone or in any
// wave and for any expert chunking (DESIGN.md, Numerics). cuBLAS(Lt) is not used for that reason: it picks
// algorithms and split-K by shape. Where practical the kernels replay the CPU backend's statements
// exactly (products rounded before the add, transcendentals in double rounded once): the CUDA-core
// MatMul, the router, the experts, ShortConvSiLU, KDA and the elementwise ops then equal replay/cpu bit
// for bit; RMSNorm and AttnResMix (warp sums), MLA (online softmax), TokenStats (parallel double sums) and
// the tensor-core matmuls (k chunks of 16) differ from it at rounding level and are compared with a
// tolerance (package ops/opstest).
//
// # Performance
//
// In BF16 precision the matmuls with bfloat16 or MXFP4 weights run on the tensor cores (matmul_tc.cu:
// mma.sync bf16 -> f32, each element summing k chunks of 16 in ascending order, so still batch invariant;
// about 170-180 TFLOP/s at K3's sizes on an H200, a quarter of the chip's bf16 rate); FP32 precision, f32
// weights and the router's unrounded logits use the CUDA-core kernel (matmul.cu), which replays the CPU
// backend's loop bit for bit (Options.NoTensorCores selects it everywhere). The routed experts of an
// ExpertsAccumulate call run grouped in BF16 precision (experts.cu: the rows gathered expert by expert,
// one launch for every expert's gate and up GEMMs with SiTU in the epilogue, one for the w2 GEMMs, one
// that adds each row's expert outputs in ascending id; cp.async, ldmatrix, MXFP4 decoded into shared
// memory, the same mma sequence as matmul_tc.cu, so bit-identical to the per-expert path that FP32
// precision and NoTensorCores keep): 146-179 TFLOP/s at K3's sizes (128 experts of 300 to 1,200 rows,
// or all 896), where the per-expert path (six launches an expert) gave 18-34. The other kernels are the
// simple correct first versions: KDA steps token by token, MLA scores on the CUDA cores. The next
// versions (cp.async/ldmatrix then wgmma matmuls, the chunked KDA, a tensor-core MLA, a fused lm_head and
// log-softmax, reads that bypass the CPU copy) are listed in the .cu files and in NOTES.md; cuBLASLt can
// only come with a pinned algorithm, no split-K and a test that proves its invariance.
package cuda
