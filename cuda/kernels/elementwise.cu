// elementwise.cu: the ops that compute each output element from the same element of their inputs (Add,
// Round, MulSigmoid, SiTUGLU), the data movement ops (Slice, Gather, bf16 widening) and the scatter-add
// of routed expert outputs.
//
// Versions:
//   1. one thread per element in a grid-stride loop, 256 threads a block. Each element is computed on its
//      own, so the grid never changes a bit. The arithmetic is replay/cpu's, statement for statement
//      (products rounded, transcendentals in double): outputs equal the CPU backend's bit for bit.
//      Memory-bound; 4-byte accesses (16-byte vector accesses are a later, measured step).
//   2. k_round4 (MatMul's rounding pass), k_add4 and k_gather4: four elements a thread, 16-byte loads and
//      stores (8-byte loads of a bfloat16 table), the same statement per element, so the same bits.
//      k_gather4 takes a block a row (no 64-bit division an element: version 1's k_gather ran at about
//      1.2 TB/s on the H200 for K3's 65,536 x 7,168 embedding rows, 2.35 ms).
//   3. k_add, k_mul_sigmoid (and their four-element forms) round their inputs as they load them: a
//      MatMul's output reaches them with its rounding deferred (cuda/deferred.go), which saves the
//      MatMul's rounding pass (a read and a write of its output). k_mul_sigmoid4 is new with it.
//   4. k_add_sum and k_add_sum4 (ops.SumAdder, cuda/addsum.go): Add(p, Add(a, b)) in one pass, the two
//      Adds' statements per element (the middle sum rounded, then rounded as the second Add loads it: a
//      no-op), so their bits; an MoE layer's routed and shared outputs reach the running sum without
//      their sum being written out and read back (two 65,536 x 7,168 float32 passes a slice at K3's size).
#include "common.cuh"

// k_round: out[i] = rnd(x[i]) (out may be x).
extern "C" __global__ void k_round(float* out, const float* x, i64 n, int bf) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = rnd(x[i], bf);
}

// k_round4: k_round four elements a thread (16-byte loads and stores; n4 = n / 4, both 16-byte aligned).
// MatMul's rounding pass (matmul.go gemmLt) over a GEMM's float32 output: the same rnd per element.
extern "C" __global__ void k_round4(float4* out, const float4* x, i64 n4, int bf) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n4; i += (i64)gridDim.x * blockDim.x) {
        float4 v = x[i];
        out[i] = make_float4(rnd(v.x, bf), rnd(v.y, bf), rnd(v.z, bf), rnd(v.w, bf));
    }
}

// k_widen_bf16: out[i] = float(x[i]) for raw bfloat16 x (exact).
extern "C" __global__ void k_widen_bf16(float* out, const u16* x, i64 n) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = bf16_to_f32(x[i]);
}

// k_add: out[i] = rnd(rnd(a[i]) + rnd(b[i])): the inputs rounded as loaded (a MatMul's deferred
// rounding, cuda/deferred.go; a no-op on values that are rounded already).
extern "C" __global__ void k_add(float* out, const float* a, const float* b, i64 n, int bf) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = rnd(__fadd_rn(rnd(a[i], bf), rnd(b[i], bf)), bf);
}

// k_add4: k_add four elements a thread (n4 = n / 4; every buffer 16-byte aligned).
extern "C" __global__ void k_add4(float4* out, const float4* a, const float4* b, i64 n4, int bf) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n4; i += (i64)gridDim.x * blockDim.x) {
        const float4 x = rnd4(a[i], bf), y = rnd4(b[i], bf);
        out[i] = make_float4(rnd(__fadd_rn(x.x, y.x), bf), rnd(__fadd_rn(x.y, y.y), bf), rnd(__fadd_rn(x.z, y.z), bf),
                             rnd(__fadd_rn(x.w, y.w), bf));
    }
}

// k_add_sum: out[i] = rnd(rnd(p[i]) + rnd(rnd(a[i]) + rnd(b[i]))): k_add of p and k_add's sum of a and b.
extern "C" __global__ void k_add_sum(float* out, const float* p, const float* a, const float* b, i64 n, int bf) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = rnd(__fadd_rn(rnd(p[i], bf), rnd(__fadd_rn(rnd(a[i], bf), rnd(b[i], bf)), bf)), bf);
}

// k_add_sum4: k_add_sum four elements a thread, as k_add4 (n4 = n / 4; every buffer 16-byte aligned).
extern "C" __global__ void k_add_sum4(float4* out, const float4* p, const float4* a, const float4* b, i64 n4, int bf) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n4; i += (i64)gridDim.x * blockDim.x) {
        const float4 x = rnd4(a[i], bf), y = rnd4(b[i], bf), q = rnd4(p[i], bf);
        const float4 s = make_float4(rnd(__fadd_rn(x.x, y.x), bf), rnd(__fadd_rn(x.y, y.y), bf), rnd(__fadd_rn(x.z, y.z), bf),
                                     rnd(__fadd_rn(x.w, y.w), bf));
        out[i] = make_float4(rnd(__fadd_rn(q.x, s.x), bf), rnd(__fadd_rn(q.y, s.y), bf), rnd(__fadd_rn(q.z, s.z), bf),
                             rnd(__fadd_rn(q.w, s.w), bf));
    }
}

// k_mul_sigmoid: out[i] = rnd(rnd(x[i]) * sigmoid(rnd(g[i]))), the inputs rounded as loaded (as k_add).
extern "C" __global__ void k_mul_sigmoid(float* out, const float* x, const float* g, i64 n, int bf) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = rnd(__fmul_rn(rnd(x[i], bf), sigmoid_f(rnd(g[i], bf))), bf);
}

// mul_sigmoid4 is k_mul_sigmoid's statement for four elements, the sigmoid by mul_sigmoid_bf4 (the
// double-precision statement's bits; k_mul_sigmoid is the oracle; run 94).
__device__ __forceinline__ float4 mul_sigmoid4(float4 x, float4 g, int bf) {
    const float4 a = rnd4(x, bf), b = rnd4(g, bf);
    return mul_sigmoid_bf4(a, b, bf);
}

// k_mul_sigmoid4: k_mul_sigmoid four elements a thread (n4 = n / 4; every buffer 16-byte aligned).
extern "C" __global__ void k_mul_sigmoid4(float4* out, const float4* x, const float4* g, i64 n4, int bf) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n4; i += (i64)gridDim.x * blockDim.x)
        out[i] = mul_sigmoid4(x[i], g[i], bf);
}

// k_mul_sigmoid4n: k_mul_sigmoid4 that also writes the outputs' bfloat16 bits to nb (BF16 precision,
// where they are bfloat16 values: exact), the copy the next MatMul reads (cuda/narrow.go): MLA's gated
// output feeds o_proj, which otherwise converts it in a pass of its own. A null out writes the copy alone
// (cuda/narrow.go, narrow-only outputs).
extern "C" __global__ void k_mul_sigmoid4n(float4* out, const float4* x, const float4* g, i64 n4, int bf, uint2* nb) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n4; i += (i64)gridDim.x * blockDim.x) {
        const float4 y = mul_sigmoid4(x[i], g[i], bf);
        if (out != 0) out[i] = y;
        nb[i] = bf16x4_bits(y);
    }
}

// k_situ: out[i] = rnd(situ(gate[i], up[i])) (out may be gate).
extern "C" __global__ void k_situ(float* out, const float* gate, const float* up, i64 n, float beta, float linBeta, int bf) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = rnd(situ_f(gate[i], up[i], beta, linBeta), bf);
}

// k_slice: out[r, j] = x[r, from + j] for j < w (x has cols columns).
extern "C" __global__ void k_slice(float* out, const float* x, i64 rows, int cols, int from, int w) {
    i64 n = rows * w;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        i64 r = i / w;
        int j = (int)(i - r * w);
        out[i] = x[r * cols + from + j];
    }
}

// k_gather: out[r, :] = table[ids[r], :] for a table stored as dt (ids checked on the host).
extern "C" __global__ void k_gather(float* out, const void* table, int dt, const int* ids, i64 rows, int cols) {
    i64 n = rows * cols;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        i64 r = i / cols;
        int c = (int)(i - r * cols);
        out[i] = ld_w(table, dt, (i64)ids[r] * cols + c);
    }
}

// k_gather4: k_gather for cols % 4 == 0 (cols4 = cols / 4), out 16-byte aligned and the table 16-byte
// (float32) or 8-byte (bfloat16) aligned: block r copies row ids[r], four columns a thread a step.
// Launch: gridDim rows, blockDim 256.
extern "C" __global__ void k_gather4(float4* out, const void* table, int dt, const int* ids, int cols4) {
    const i64 r = blockIdx.x;
    const i64 src = (i64)ids[r] * cols4;
    float4* o = out + r * cols4;
    for (int c = threadIdx.x; c < cols4; c += blockDim.x) {
        if (dt == DT_BF16) {
            const uint2 u = ((const uint2*)table)[src + c];
            o[c] = make_float4(bf16_to_f32((u16)(u.x & 0xffffu)), bf16_to_f32((u16)(u.x >> 16)),
                               bf16_to_f32((u16)(u.y & 0xffffu)), bf16_to_f32((u16)(u.y >> 16)));
        } else {
            o[c] = ((const float4*)table)[src + c];
        }
    }
}

// k_scatter_add: acc[rows[i], d] += w[i] * h[i, d], the product rounded to float32 first (replay/cpu
// runExperts). rows holds distinct indices, so no two threads touch one element.
extern "C" __global__ void k_scatter_add(float* acc, const float* h, const int* rows, const float* w, i64 n, int cols) {
    i64 total = n * cols;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < total; i += (i64)gridDim.x * blockDim.x) {
        i64 r = i / cols;
        int d = (int)(i - r * cols);
        float* a = acc + (i64)rows[r] * cols + d;
        *a = __fadd_rn(*a, __fmul_rn(w[r], h[i]));
    }
}

// k_copy16: dst[0:n] = src[0:n], n bytes, dst and src 16-byte aligned; src may be mapped host memory (the
// upload ring, cuda/device/ring.go: the SMs read it over the bus, so the copy does not queue behind the weight stream's
// copies in the copy engine). Grid-stride over 16-byte words, then the tail bytes.
extern "C" __global__ void k_copy16(u8* dst, const u8* src, i64 n) {
    const i64 words = n >> 4, stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < words; i += stride)
        ((uint4*)dst)[i] = ((const uint4*)src)[i];
    for (i64 i = (words << 4) + blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = src[i];
}
