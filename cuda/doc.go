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
// run time. libcublasLt is optional: without it the bfloat16 matmuls run on the package's own kernel and
// DeviceInfo.CuBLASLtMissing says why (Options.CuBLASLt: CuBLASLtRequire makes it an error).
//
// # How it is built
//
// Bindings: libcuda.so.1 (the driver API), libnvrtc.so.13 (run-time compilation) and libcublasLt.so.13
// (the dense bfloat16 matmuls) are opened with dlopen through github.com/ebitengine/purego (driver.go,
// nvrtc.go, cublaslt.go); every call's return code is checked and a failure is an *Error naming the call
// (errors.Is(err, ErrCUDA)). $POTATO_LIBCUDA, $POTATO_NVRTC and $POTATO_CUBLASLT name the libraries when
// they are not on the loader's path.
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
// and waits. A panic on that thread is recovered and returned as an error wrapping ErrInternal. Every
// op passes through one function there (Backend.run), which is where ops.OpProfiler times them: with
// ProfileOps on, a timing event on the compute stream before and after each op's closure (profile.go).
//
// Sizes: a tensor holds up to 2^34 elements (64 GiB of float32; MaxElements, ops.ElementLimit), with
// fewer than 2^31 rows and columns. Every kernel indexes elements with 64-bit integers, and launch checks
// each grid against the device's limits, so a wave of 65,536 K3 tokens (3.2e9 elements at the routed
// experts' widest activation) runs as one wave.
//
// Memory: tensors live in device memory, allocated stream-ordered (cuMemAllocAsync) from the device's
// pool; activations are float32 (bfloat16 values in BF16 precision), weights stay as uploaded (raw
// bfloat16 or float32, no host decoding), and routed experts stay MXFP4-packed and are decoded inside the
// matmul kernel as it stages each tile. Weights are copied on a second stream, straight from the caller's
// bytes when they lie in pinned memory from AllocHost (the engine reads the checkpoint into such buffers:
// ops.HostMemory), else through a pinned staging buffer; the other host transfers use the staging buffer.
// An upload from ordinary pinned memory waits for its own copy (the caller may reuse the buffer); from a
// buffer marked immutable (MarkStable, ops.StableHostMemory: the engine's host cache) an expert's copy
// is only queued, with an event after it, and ExpertsAccumulate and Free make the compute stream wait for
// their experts' events, so a layer's experts stream while its attention runs (stable.go). UploadExperts
// (ops.ExpertBatchUploader) takes a batch in one trip to the CUDA thread and copies the experts of one
// stable buffer as one span into one device block, of which they are views (experts_upload.go). The
// ops' own small uploads (tile tables, plans, row starts) never wait for the stream: they go through a
// ring of device-mapped pinned memory copied by a kernel on the compute stream, each region reused once
// the event behind its copy has completed (ring.go), so no op drains the stream and no small copy queues
// behind the weight stream in the copy engine. An allocation the device cannot satisfy is an *Error
// matching ops.ErrOutOfMemory; the engine then runs the wave as smaller waves.
//
// # Numerics
//
// Each op computes the loop its ops.Backend doc comment states, with every reduction in a fixed order
// that depends on the shapes of one sequence only, never on the number of rows, the other sequences of
// the wave, the grid or the block that runs it: a sequence's results are bit-identical alone or in any
// wave and for any expert chunking (DESIGN.md, Numerics). cuBLASLt is used on those terms only
// (cublaslt_plan.go): its heuristic picks kernels, tiles and splits of k by problem size, so the
// algorithm is chosen once per weight shape at a fixed n, forced to split-K 1 with no reduction scheme,
// allowed no workspace beyond a few bytes of counters (too little for any tile of partial sums), checked
// valid for every n from 1 to the largest of one call (2^31-1 elements an operand; a larger n runs as
// calls of whole row blocks, which changes no bit), and then used for every n; a shape that no
// algorithm fits always runs the package's kernel (a choice by shape, never by n), and a test on the H200
// finds rows bit-identical alone and at any offset of waves of up to 20,000 rows. Where practical the
// kernels replay the CPU backend's statements exactly (products rounded before the add, transcendentals
// in double rounded once): the CUDA-core MatMul, the router, the experts, ShortConvSiLU, KDA in FP32
// precision and the elementwise ops then equal replay/cpu bit for bit; RMSNorm and AttnResMix (warp
// sums), MLA (online softmax; on the tensor cores also a split p), TokenStats (parallel double sums), KDA
// in BF16 precision (fused multiply-adds in the recurrence, single-precision decay and beta) and the
// tensor-core matmuls (k chunks of 16 in the package's kernel, the pinned algorithm's order in cuBLASLt)
// differ from it at rounding level and are compared with a tolerance (package ops/opstest).
//
// # Performance
//
// In BF16 precision the matmuls with a bfloat16 weight (the dense projections, shared experts, latent
// projections, the router's logits, the lm_head of TokenStats) run on cuBLASLt with the pinned algorithm
// (Options.CuBLASLt, on by default): x is converted to a bfloat16 copy (convert.cu), kept with the tensor
// for the next matmuls on the same x (narrow.go), the product is accumulated in float32 and the outputs
// are rounded to bfloat16 in place, about 665-735 TFLOP/s at K3's 12288x7168 shapes for 16,384-65,536
// rows on an H200 (the GEMM alone 720-800; the chip's bf16 rate is about 790). The SiTU-GLU FFNs (layer
// 0's and the shared experts) run fused (ffn.go, ops.SiTUFFN): one conversion of x, unrounded gate and up
// GEMMs, SiTU by exact tables straight into the down GEMM's bfloat16 operand, the unfused ops' bits. The
// routed
// experts (MXFP4), and every bfloat16 weight under CuBLASLtOff or in a shape no algorithm fits, run on the
// tensor cores in the package's kernel (matmul_tc.cu: mma.sync bf16 -> f32, each element summing k
// chunks of 16 in ascending order, so batch invariant as well; about 170-180 TFLOP/s). FP32 precision,
// f32 weights and, without cuBLASLt, the router's unrounded logits use the CUDA-core kernel (matmul.cu),
// which replays the CPU backend's loop bit for bit (Options.NoTensorCores selects it everywhere). MLA in BF16 precision
// runs flash-attention style on the tensor cores (mla_tc.cu: q.k exact on mma.sync bf16 -> f32, p split
// into two bfloat16 parts for p.v, online softmax over 64-key blocks anchored at each sequence start, no
// T x T matrix): about 180 TFLOP/s of causal attention at K3's sizes (11.4 ms for 4 x 4,096 tokens, 96
// heads, against 0.60 s for the CUDA-core version 1, which stays for FP32 and NoTensorCores). The routed
// experts of an ExpertsAccumulate call run grouped in BF16 precision (experts.cu: the rows gathered
// expert by expert, one launch for every expert's gate and up GEMMs with SiTU in the epilogue, one for
// the w2 GEMMs, one that adds each row's expert outputs in ascending id; cp.async, ldmatrix, MXFP4
// decoded into shared memory, the same mma sequence as matmul_tc.cu, so bit-identical to the per-expert
// path that FP32 precision and NoTensorCores keep): 146-179 TFLOP/s at K3's sizes, where the per-expert
// path (six launches an expert) gave 18-34. With cuBLASLt, where it pins both expert shapes, the routed
// experts' GEMMs run there instead, over weights decoded to bfloat16 a chunk at a time (experts_lt.go):
// about 310-340 TFLOP/s at the ~1,200 rows an expert of a 65,536-token wave, each call's experts spread
// over four streams (experts_lt_lanes.go, Options.ExpertStreams) so that one expert's last wave of tiles
// overlaps the next ones', with their scratch kept outside the pool (cuda/device/kept.go). KDA still steps token by
// token (one pass over the state a token: 38 ms for 16 x 4,096 tokens and 96 heads in BF16 precision,
// 45 ms in FP32). TokenStats reduces 1 GiB of logits at a time (tokenstats.cu version 2). The next
// versions (wgmma for the experts and MLA, the chunked KDA, reductions in the lm_head's epilogue) are
// listed in the .cu files and in cuda/records/JOURNAL.md.
package cuda
