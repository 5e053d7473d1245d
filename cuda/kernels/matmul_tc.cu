// matmul_tc.cu: out = rounded(x w^T) on the tensor cores, for BF16 precision with bfloat16 or MXFP4
// weights (both exact in bfloat16) and activations that are bfloat16 values (the ops contract: inputs are
// already rounded in BF16 precision; x is read as bfloat16 with round-to-nearest-even, exact for them).
//
// The contract allows a blocked sum if the blocking is the same for every row (replay/ops MatMul). Here
// each output element is one float32 accumulator that receives the products of k chunks of 16 in
// ascending order, one mma.sync.m16n8k16 (bf16 x bf16 -> f32) per chunk: the products are exact and each
// chunk's sum is the tensor core's fixed reduction. The chunk sequence is the same for every element
// whatever n is, the tile a row falls in or the grid, so results are batch invariant; against the CPU
// backend (one ascending float32 sum) they differ at float32 rounding level, seen after the bf16 rounding
// as an occasional one-ulp flip.
//
// Versions:
//   2. (this file) block tile 128 x 128, k panels of 32 staged in shared memory as bfloat16 (rows padded
//      by 8 halves: the fragment loads of a warp hit 32 distinct banks), 8 warps each 64 x 32 of the
//      output (4 x 4 mma tiles, 64 accumulators a thread). No cp.async, no ldmatrix, no double buffering:
//      the staging is plain loads converted on the way (MXFP4 decoded there). The CUDA-core kernel
//      (matmul.cu, version 1) stays for FP32 precision, float32 weights and unrounded outputs (router).
//   3. the same tiles and mma sequence (so the same bits as version 2), with 16-byte global loads (4
//      floats of x, 8 bfloat16 or 32 MXFP4 codes of w a load) held in registers while the tensor cores
//      work on the panel before: the next panel's loads are in flight during the mma loop. Used when
//      k % 8 == 0 (bf16) or k % 32 == 0 (MXFP4) and the operands are 16-byte aligned; version 2 stays the
//      fallback for other shapes (a choice by shape, never by n).
//      Next: cp.async and ldmatrix; then wgmma (sm_90a) with TMA-staged tiles; smaller row tiles for small n.
#include "common.cuh"

#define TBM 128
#define TBN 128
#define TBK 32
#define TPAD 8
#define TC_THREADS 256

#define TW_BF16 1
#define TW_MXFP4 2

template <int WT>
__device__ __forceinline__ u32 load_w_bits(const void* w, const u8* scales, i64 row, int p, int k, int pw, int sw) {
    if (WT == TW_BF16) return ((const u16*)w)[row * k + p];
    u8 b = ((const u8*)w)[row * pw + (p >> 1)];
    u32 code = (p & 1) ? (b >> 4) : (b & 15u);
    return bf16_bits(__fmul_rn(e2m1_values[code], e8m0(scales[row * sw + (p >> 5)])));  // exact in bf16
}

__device__ __forceinline__ void mma_bf16(float* c, const u32* a, const u32* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int WT>
__device__ __forceinline__ void matmul_tc(float* out, const float* x, const void* w, const u8* scales, i64 n, int m,
                                          int k, int pw, int sw, int bf) {
    __shared__ __align__(16) u16 As[TBM][TBK + TPAD];
    __shared__ __align__(16) u16 Bs[TBN][TBK + TPAD];
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int wm = warp >> 2, wn = warp & 3;  // the warp's 64-row half and 32-column quarter
    int g = lane >> 2, t = lane & 3;    // mma fragment coordinates
    i64 row0 = (i64)blockIdx.y * TBM;
    int col0 = blockIdx.x * TBN;
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    for (int p0 = 0; p0 < k; p0 += TBK) {
        for (int e = tid; e < TBM * TBK; e += TC_THREADS) {
            int r = e / TBK, kk = e - r * TBK;
            int p = p0 + kk;
            i64 xr = row0 + r;
            int wr = col0 + r;
            As[r][kk] = (u16)((xr < n && p < k) ? bf16_bits(x[xr * k + p]) : 0u);
            Bs[r][kk] = (u16)((wr < m && p < k) ? load_w_bits<WT>(w, scales, wr, p, k, pw, sw) : 0u);
        }
        __syncthreads();
#pragma unroll
        for (int ks = 0; ks < TBK; ks += 16) {
            u32 a[4][4], b[4][2];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int r = wm * 64 + i * 16 + g;
                a[i][0] = *(const u32*)&As[r][ks + 2 * t];
                a[i][1] = *(const u32*)&As[r + 8][ks + 2 * t];
                a[i][2] = *(const u32*)&As[r][ks + 2 * t + 8];
                a[i][3] = *(const u32*)&As[r + 8][ks + 2 * t + 8];
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int c = wn * 32 + j * 8 + g;
                b[j][0] = *(const u32*)&Bs[c][ks + 2 * t];
                b[j][1] = *(const u32*)&Bs[c][ks + 2 * t + 8];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) mma_bf16(acc[i][j], a[i], b[j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            i64 r = row0 + wm * 64 + i * 16 + g;
            int c = col0 + wn * 32 + j * 8 + 2 * t;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                i64 rr = r + (e >> 1) * 8;
                int cc = c + (e & 1);
                if (rr < n && cc < m) out[rr * m + cc] = rnd(acc[i][j][e], bf);
            }
        }
    }
}

// matmul_tc_vec is version 3: matmul_tc's tiles and mma order with 16-byte loads staged in registers one
// panel ahead. Needs k % 8 == 0 (bf16) or k % 32 == 0 (MXFP4) and 16-byte aligned x and w.
template <int WT>
__device__ __forceinline__ void matmul_tc_vec(float* out, const float* x, const void* w, const u8* scales, i64 n,
                                              int m, int k, int pw, int sw, int bf) {
    __shared__ __align__(16) u16 As[TBM][TBK + TPAD];
    __shared__ __align__(16) u16 Bs[TBN][TBK + TPAD];
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int wm = warp >> 2, wn = warp & 3;
    int g = lane >> 2, t = lane & 3;
    i64 row0 = (i64)blockIdx.y * TBM;
    int col0 = blockIdx.x * TBN;
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    // registers of the next panel: x as 4 float4 (rows tid/8 + 32 j, k 4*(tid%8)); w as 2 uint4 of 8
    // bfloat16 (rows tid/4 + 64 j, k 8*(tid%4)) or, for MXFP4, one uint4 of 32 codes and a scale byte
    // (row tid, threads < 128)
    float4 xr[4];
    uint4 wr[2];
    u32 ws = 0;
    auto load = [&](int p0) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int r = (tid >> 3) + 32 * j, kk = (tid & 7) * 4;
            i64 gr = row0 + r;
            xr[j] = (gr < n && p0 + kk < k) ? *(const float4*)(x + gr * k + p0 + kk) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        if (WT == TW_BF16) {
#pragma unroll
            for (int j = 0; j < 2; j++) {
                int r = (tid >> 2) + 64 * j, kk = (tid & 3) * 8;
                i64 gr = col0 + r;
                wr[j] = (gr < m && p0 + kk < k) ? *(const uint4*)((const u16*)w + gr * k + p0 + kk) : make_uint4(0, 0, 0, 0);
            }
        } else if (tid < TBN) {
            i64 gr = col0 + tid;
            bool in = gr < m && p0 < k;
            wr[0] = in ? *(const uint4*)((const u8*)w + gr * pw + (p0 >> 1)) : make_uint4(0, 0, 0, 0);
            ws = in ? scales[gr * sw + (p0 >> 5)] : 127u;
        }
    };
    auto store = [&]() {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int r = (tid >> 3) + 32 * j, kk = (tid & 7) * 4;
            uint2 v;
            v.x = bf16_bits(xr[j].x) | (bf16_bits(xr[j].y) << 16);
            v.y = bf16_bits(xr[j].z) | (bf16_bits(xr[j].w) << 16);
            *(uint2*)&As[r][kk] = v;
        }
        if (WT == TW_BF16) {
#pragma unroll
            for (int j = 0; j < 2; j++) {
                int r = (tid >> 2) + 64 * j, kk = (tid & 3) * 8;
                *(uint4*)&Bs[r][kk] = wr[j];
            }
        } else if (tid < TBN) {
            float sc = e8m0(ws);
            u32 words[4] = {wr[0].x, wr[0].y, wr[0].z, wr[0].w};
#pragma unroll
            for (int q = 0; q < 4; q++) {
                u32 wd = words[q];  // 8 codes: columns 8q .. 8q+7, low nibble first
                u32 h[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    u32 lo = bf16_bits(__fmul_rn(e2m1_values[(wd >> (8 * e)) & 15u], sc));
                    u32 hi = bf16_bits(__fmul_rn(e2m1_values[(wd >> (8 * e + 4)) & 15u], sc));
                    h[e] = lo | (hi << 16);
                }
                *(uint4*)&Bs[tid][8 * q] = make_uint4(h[0], h[1], h[2], h[3]);
            }
        }
    };

    load(0);
    for (int p0 = 0; p0 < k; p0 += TBK) {
        store();
        __syncthreads();
        if (p0 + TBK < k) load(p0 + TBK);
#pragma unroll
        for (int ks = 0; ks < TBK; ks += 16) {
            u32 a[4][4], b[4][2];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int r = wm * 64 + i * 16 + g;
                a[i][0] = *(const u32*)&As[r][ks + 2 * t];
                a[i][1] = *(const u32*)&As[r + 8][ks + 2 * t];
                a[i][2] = *(const u32*)&As[r][ks + 2 * t + 8];
                a[i][3] = *(const u32*)&As[r + 8][ks + 2 * t + 8];
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int c = wn * 32 + j * 8 + g;
                b[j][0] = *(const u32*)&Bs[c][ks + 2 * t];
                b[j][1] = *(const u32*)&Bs[c][ks + 2 * t + 8];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) mma_bf16(acc[i][j], a[i], b[j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            i64 r = row0 + wm * 64 + i * 16 + g;
            int c = col0 + wn * 32 + j * 8 + 2 * t;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                i64 rr = r + (e >> 1) * 8;
                int cc = c + (e & 1);
                if (rr < n && cc < m) out[rr * m + cc] = rnd(acc[i][j][e], bf);
            }
        }
    }
}

// Launch (each): blockDim 256, gridDim (ceil(m / 128), ceil(n / 128)); the arguments are matmul.cu's.
extern "C" __global__ void __launch_bounds__(TC_THREADS) k_matmul_tc_bf16(float* out, const float* x, const void* w,
                                                                          const u8* scales, i64 n, int m, int k,
                                                                          int pw, int sw, int bf) {
    matmul_tc<TW_BF16>(out, x, w, scales, n, m, k, pw, sw, bf);
}

extern "C" __global__ void __launch_bounds__(TC_THREADS) k_matmul_tc_mxfp4(float* out, const float* x, const void* w,
                                                                           const u8* scales, i64 n, int m, int k,
                                                                           int pw, int sw, int bf) {
    matmul_tc<TW_MXFP4>(out, x, w, scales, n, m, k, pw, sw, bf);
}

extern "C" __global__ void __launch_bounds__(TC_THREADS) k_matmul_tc_bf16_vec(float* out, const float* x, const void* w,
                                                                              const u8* scales, i64 n, int m, int k,
                                                                              int pw, int sw, int bf) {
    matmul_tc_vec<TW_BF16>(out, x, w, scales, n, m, k, pw, sw, bf);
}

extern "C" __global__ void __launch_bounds__(TC_THREADS) k_matmul_tc_mxfp4_vec(float* out, const float* x,
                                                                               const void* w, const u8* scales, i64 n,
                                                                               int m, int k, int pw, int sw, int bf) {
    matmul_tc_vec<TW_MXFP4>(out, x, w, scales, n, m, k, pw, sw, bf);
}
