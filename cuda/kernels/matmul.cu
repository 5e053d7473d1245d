// matmul.cu: out = x w^T with float32 activations x (n x k) and weights w (m x k) stored as float32,
// bfloat16 or MXFP4 (routed experts, decoded on the fly from their packed bytes).
//
// The contract (replay/ops MatMul): out[i,j] = rounded(sum_k x[i,k] w[j,k]), the sum in float32 in
// ascending k, the same blocking for every row. Batch invariance needs each element's order to be fixed
// whatever n is: cuBLAS(Lt) chooses algorithms and split-K by shape, so it cannot be used as is.
//
// Versions:
//   1. classic shared-memory tiling on the CUDA cores: 64 x 64 output tiles, k panels of 16, 256 threads,
//      each thread a 4 x 4 register tile (rows ty + 16 i, columns tx + 16 j). Every output element is one
//      float32 accumulator that adds the rounded products x[i,p] * w[j,p] for p = 0, 1, ..., k-1, exactly
//      the CPU backend's loop (padding past k adds +0 products, which leave a sum unchanged: a float32 sum
//      that starts at +0 is never -0). So results equal replay/cpu bit for bit and cannot depend on n, on
//      the tile a row lands in or on the grid. Multiply and add are separate instructions (__fmul_rn,
//      __fadd_rn): half the FMA rate, kept for that equality. Weights are widened to float32 while the
//      tile is staged in shared memory; MXFP4 codes are decoded there as well (e2m1 * 2^(s-127), exact).
//      Dead ends: none yet. Next (not done): tensor cores (mma.sync bf16 -> f32, k chunks of 16 in a fixed
//      order, independent of n and of the tile position); then wgmma on sm_90a. Either changes the bits
//      against the CPU (partial sums of 16), never against itself.
#include "common.cuh"

#define BM 64
#define BN 64
#define BK 16
#define THREADS 256

#define W_F32 0
#define W_BF16 1
#define W_MXFP4 2

// load_w returns w[row, p] of an m x k weight; for MXFP4, w is the packed bytes (pw per row, column 2j in
// the low nibble of byte j) and scales the E8M0 bytes (sw per row, one per 32 columns).
template <int WT>
__device__ __forceinline__ float load_w(const void* w, const u8* scales, i64 row, int p, int k, int pw, int sw) {
    if (WT == W_F32) return ((const float*)w)[row * k + p];
    if (WT == W_BF16) return bf16_to_f32(((const u16*)w)[row * k + p]);
    u8 b = ((const u8*)w)[row * pw + (p >> 1)];
    u32 code = (p & 1) ? (b >> 4) : (b & 15u);
    return __fmul_rn(e2m1_values[code], e8m0(scales[row * sw + (p >> 5)]));
}

template <int WT>
__device__ __forceinline__ void matmul_tile(float* out, const float* x, const void* w, const u8* scales, i64 n, int m,
                                            int k, int pw, int sw, int bf) {
    __shared__ float As[BK][BM];
    __shared__ float Bs[BK][BN];
    int tid = threadIdx.x;
    int tx = tid & 15, ty = tid >> 4;
    i64 row0 = (i64)blockIdx.y * BM;
    int col0 = blockIdx.x * BN;
    int lr = tid >> 2;       // the tile row this thread stages (0..63)
    int lk = (tid & 3) * 4;  // its four k positions
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;

    for (int p0 = 0; p0 < k; p0 += BK) {
        i64 xr = row0 + lr;
        int wr = col0 + lr;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int p = p0 + lk + e;
            As[lk + e][lr] = (xr < n && p < k) ? x[xr * k + p] : 0.0f;
            Bs[lk + e][lr] = (wr < m && p < k) ? load_w<WT>(w, scales, wr, p, k, pw, sw) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = As[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; j++) b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = __fadd_rn(acc[i][j], __fmul_rn(a[i], b[j]));
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        i64 r = row0 + ty + 16 * i;
        if (r >= n) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int c = col0 + tx + 16 * j;
            if (c < m) out[r * m + c] = rnd(acc[i][j], bf);
        }
    }
}

// Launch (each): blockDim 256, gridDim (ceil(m / 64), ceil(n / 64)). bf = 1 rounds the outputs to
// bfloat16 (MatMul in BF16 precision), 0 leaves them (FP32 precision; the router's logits).
extern "C" __global__ void __launch_bounds__(THREADS) k_matmul_f32(float* out, const float* x, const void* w,
                                                                   const u8* scales, i64 n, int m, int k, int pw,
                                                                   int sw, int bf) {
    matmul_tile<W_F32>(out, x, w, scales, n, m, k, pw, sw, bf);
}

extern "C" __global__ void __launch_bounds__(THREADS) k_matmul_bf16(float* out, const float* x, const void* w,
                                                                    const u8* scales, i64 n, int m, int k, int pw,
                                                                    int sw, int bf) {
    matmul_tile<W_BF16>(out, x, w, scales, n, m, k, pw, sw, bf);
}

extern "C" __global__ void __launch_bounds__(THREADS) k_matmul_mxfp4(float* out, const float* x, const void* w,
                                                                     const u8* scales, i64 n, int m, int k, int pw,
                                                                     int sw, int bf) {
    matmul_tile<W_MXFP4>(out, x, w, scales, n, m, k, pw, sw, bf);
}
