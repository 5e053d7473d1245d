// experts_wg.cu: the grouped expert GEMMs of experts.cu on Hopper's warpgroup MMA (wgmma, sm_90a only),
// with the MXFP4 weights decoded in registers, so that no decoded weight reaches global or shared memory.
// cuda/experts.go launches them on the grouped path's plan (gather, SiTU tables, gate/up, down, combine:
// experts.cu's other kernels, with tiles of 256 rows); only the two GEMMs change:
//
//	k_experts_gateup_wg    h[i, c] = rnd(situ(rnd(zs[i] . w1_e[c]), rnd(zs[i] . w3_e[c])))   bfloat16
//	k_experts_down_wg      h2[i, c] = rnd(h[i] . w2_e[c])                                    bfloat16
//
// The weights are wgmma's A operand (64 weight rows a warpgroup, from registers), the gathered rows its B
// (256 rows a block tile, from shared memory): each block computes out^T for 128 weight rows by 256 rows.
//
// Bits: each output is one float32 accumulator over k in ascending k steps of 16 (one wgmma each), the
// order inside a step the tensor core's. Nothing in a row's sum depends on the other rows of its tile, the
// tile table or the grid, so the path is batch invariant and calls on expert subsets equal one call; the
// sums are not mma.sync's, so the oracle is the grouped kernels within rounding (the decoded values and the
// rounding points are theirs: experts.cuh). On the H200 the results came out bit-identical to the cuBLASLt
// path's at K3's sizes (TestExpertsWGTiming, runs 45-47).
//
// Versions (H200, K3 sizes, 896 experts, 262,144 tokens x 16: ~4,680 rows an expert; TFLOP/s of the
// kernel alone, with decoding / without; the cuBLASLt path's whole call 311-380 TFLOP/s in the same tests):
//   1. activations as A and weights as B, both from shared memory in the 128-byte swizzle: block tile 128
//      rows x 256 weight rows (gate/up: 128 columns of w1 and the same 128 of w3), two warpgroups of 64
//      rows, k panels of 64 (four activation stages by cp.async, three weight stages), every thread
//      decoding one weight row's 64 codes a panel into shared memory while the tensor cores run the panel
//      before. A wgmma under a branch (a warpgroup past the tile's rows) made ptxas serialize them all
//      (207 TFLOP/s); unconditional: gate/up 297 / 465, down 327 / 472.
//   2. version 1 warp-specialized: a producer warpgroup (cp.async, load and decode) and two consumers
//      through four stages guarded by mbarriers, one persistent block an SM: 233 / 444 with the raw bytes
//      loaded a panel ahead, 177 / 432 two panels ahead (setmaxnreg cannot lift ptxas's launch-bound cap, so
//      two producer warpgroups would leave 128 registers where the wgmma need 154). Decoding 16,384 values
//      a panel for 128 rows (one decode per 256 flops) was the limit in both.
//   3. weights as A from registers (this file): each warpgroup decodes its own 64 weight rows straight
//      into wgmma's A fragments (a thread: byte t of each 32-bit word of two rows' 32-byte panel segment,
//      gathered by PRMT, decoded 8 codes at a time), so a decoded value serves 256 rows (one decode per
//      512 flops, a quarter of version 2's per block) and never touches shared memory; the activations come
//      by cp.async in four stages. gate/up: a warp's 16 A rows are 8 w1 rows and the same 8 of w3, so a
//      thread holds a gate and its up value for SiTU in the epilogue. The A registers of panel p + 1 are
//      decoded while panel p's wgmma run (two register sets, the loop unrolled by two; an even number of
//      panels, since a panel under a branch put the accumulators through a control-flow merge and ptxas
//      serialized every wgmma, C7514). gate/up 341 / 489, down 354 / 526 (run 47); the whole call 255
//      TFLOP/s against the cuBLASLt path's 311-374 in the same runs, so ExpertsAccumulate takes these
//      kernels only where cuBLASLt is not in use (they are twice the mma.sync kernels of experts.cu).
//      Next (cuda/records/JOURNAL.md, runs 45-48): a persistent tile loop whose next tile's loads and
//      first decode overlap the epilogue, stores staged through shared memory, TMA for the activations
//      from one producer warp (which needs the fragments' double buffer to fit 224 registers).
#include "common.cuh"
#include "experts.cuh"
#include "wgmma.cuh"

#define WBM 128        // weight rows of a block tile: two warpgroups of 64 (gate/up: 64 w1 rows, 64 w3 rows)
#define WBN 256        // gathered rows of a block tile
#define WBK 64         // k panel: one 128-byte swizzled row of bfloat16 a gathered row
#define WSTAGES 4      // activation stages: filled two panels ahead, read by wgmma up to a panel behind
#define W_THREADS 256  // two warpgroups
#define WB_BYTES (WBN * WBK * 2)
// dynamic shared memory: the stages and 1,024 bytes to align the first to a swizzle atom (132 KiB)
#define W_SMEM_BYTES (WSTAGES * WB_BYTES + 1024)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// gather_t returns byte t of each of the words w0 .. w3 (byte i of the result from w_i).
__device__ __forceinline__ u32 gather_t(u32 w0, u32 w1, u32 w2, u32 w3, u32 sel) {
    return __byte_perm(__byte_perm(w0, w1, sel), __byte_perm(w2, w3, sel), 0x5410);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// experts_wg is one block tile of a grouped GEMM (experts.cu's experts_gemm on wgmma, weights as A):
// out[row0 + r, c] for the tile's rows r < rows (at most 256) and the block's weight rows, from the
// bfloat16 rows a[row0 + r, 0:k] and an expert's MXFP4 matrices (wp: six device addresses an expert).
// GATEUP: m = ffn columns of SiTU(w1, w3), 64 a block; else m = latent columns of w2, 128 a block. out has
// m columns (bfloat16). k % 32 == 0.
template <bool GATEUP, int DEC>
__device__ __forceinline__ void experts_wg(u16* out, const u16* a, const int4* tiles, const u64* wp, int ncol,
                                           int m, int k, const float* __restrict__ situ) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) u8 wsm[];
    const u32 S0 = (smem_u32(wsm) + 1023u) & ~1023u;
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, wq = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
    const int tile = (int)(blockIdx.x / (u32)ncol), ct = (int)(blockIdx.x - (u32)tile * (u32)ncol);
    const int4 tl = tiles[tile];  // expert index, first row, rows
    const int nrows = tl.z;
    const u64* w = wp + 6 * tl.x;
    const int pw = k >> 1, sw = k >> 5;
    const int np = (k + WBK - 1) / WBK, np2 = (np + 1) & ~1;
    const int slab = 4 * wg + wq;  // the warp's 16 A rows of the block's 128
    // The warp's two weight rows for this thread (A rows g and g + 8 of the slab) and their output columns.
    int c0, c1;  // output column of row g and of row g + 8 (gate/up: both the same feature)
    const u8 *pk0, *pk1, *sp0, *sp1;
    bool in0, in1;
    if (GATEUP) {
        c0 = c1 = ct * (WBM / 2) + 8 * slab + g;
        in0 = in1 = c0 < m;
        const int rr = in0 ? c0 : 0;
        pk0 = (const u8*)w[0] + (i64)rr * pw, sp0 = (const u8*)w[1] + (i64)rr * sw;  // w1
        pk1 = (const u8*)w[2] + (i64)rr * pw, sp1 = (const u8*)w[3] + (i64)rr * sw;  // w3
    } else {
        c0 = ct * WBM + 16 * slab + g, c1 = c0 + 8;
        in0 = c0 < m, in1 = c1 < m;
        pk0 = (const u8*)w[4] + (i64)(in0 ? c0 : 0) * pw, sp0 = (const u8*)w[5] + (i64)(in0 ? c0 : 0) * sw;
        pk1 = (const u8*)w[4] + (i64)(in1 ? c1 : 0) * pw, sp1 = (const u8*)w[5] + (i64)(in1 ? c1 : 0) * sw;
    }
    const u32 sel = (u32)t | ((u32)(4 + t) << 4);  // byte t of two words
    const u16* abase = a + (i64)tl.y * k;

    auto issue_b = [&](int p) {  // the gathered rows' panel p into stage p % WSTAGES
        const u32 dst = S0 + (u32)(p % WSTAGES) * WB_BYTES;
        const int p0 = p * WBK, kc = tid & 7, r0 = tid >> 3;
#pragma unroll
        for (int j = 0; j < WBN * 8 / W_THREADS; j++) {
            const int r = r0 + (W_THREADS / 8) * j;
            const bool in = r < nrows && p0 + kc * 8 < k;
            cp_async16(dst + swz(r, kc), in ? abase + (i64)r * k + p0 + kc * 8 : abase, in);
        }
    };
    // raw: the 32-byte panel segments of the two weight rows (words 0-3, 4-7 of row g; then row g + 8),
    // sc: their scale bytes (row g's two groups, then row g + 8's)
    uint4 raw[4];
    u32 sc[4];
    auto load_raw = [&](int p) {
        const bool pin_ = p < np;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const bool kin = pin_ && p * WBK + 32 * h < k;
            raw[h] = kin && in0 ? *(const uint4*)(pk0 + (i64)p * (WBK / 2) + 16 * h) : make_uint4(0, 0, 0, 0);
            raw[2 + h] = kin && in1 ? *(const uint4*)(pk1 + (i64)p * (WBK / 2) + 16 * h) : make_uint4(0, 0, 0, 0);
            sc[h] = kin && in0 ? (u32)sp0[(i64)p * (WBK / 32) + h] : 127u;
            sc[2 + h] = kin && in1 ? (u32)sp1[(i64)p * (WBK / 32) + h] : 127u;
        }
    };
    // decode: the A fragments of a panel's four k steps: fr[4 s + i] is a[i] of step s. Step s takes byte
    // t of words 2s and 2s + 1 of the segment (codes 16 s + 2 t, +1 and 16 s + 2 t + 8, +9).
    auto decode = [&](u32 (&fr)[16]) {
#pragma unroll
        for (int h = 0; h < 2; h++) {  // scale group h: steps 2h, 2h + 1
            const uint4 x = decode8<DEC>(gather_t(raw[h].x, raw[h].y, raw[h].z, raw[h].w, sel), sc[h]);
            const uint4 y = decode8<DEC>(gather_t(raw[2 + h].x, raw[2 + h].y, raw[2 + h].z, raw[2 + h].w, sel), sc[2 + h]);
            // x: pairs from words 4h .. 4h+3 of row g: steps 2h (words 4h, 4h+1) and 2h + 1
            fr[4 * (2 * h) + 0] = x.x, fr[4 * (2 * h) + 2] = x.y, fr[4 * (2 * h + 1) + 0] = x.z, fr[4 * (2 * h + 1) + 2] = x.w;
            fr[4 * (2 * h) + 1] = y.x, fr[4 * (2 * h) + 3] = y.y, fr[4 * (2 * h + 1) + 1] = y.z, fr[4 * (2 * h + 1) + 3] = y.w;
        }
    };

    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; i++) acc[i] = 0.0f;
    u32 frA[16], frB[16];  // the A fragments of even and odd panels

    issue_b(0);
    cp_async_commit();
    issue_b(1);
    cp_async_commit();
    load_raw(0);
    decode(frA);
    load_raw(1);
    // one panel: wait for its rows, run its four wgmma on fr, then decode the next panel into nx (whose last
    // reader, the previous panel's wgmma, is waited for first) and load the one after
    auto panel = [&](int p, u32 (&fr)[16], u32 (&nx)[16]) {
        cp_async_wait<1>();    // this thread's copies of panel p have landed (p + 1's may be in flight)
        fence_async_shared();  // visible to wgmma
        __syncthreads();       // everyone's; and both warpgroups' wgmma of panel p - 2 have completed
        if (p + 2 < np2) issue_b(p + 2);  // into the stage panel p - 2 read
        cp_async_commit();
        const u64 db = wg_desc(S0 + (u32)(p % WSTAGES) * WB_BYTES);
        // (no pin of acc here: panel p - 1's wgmma still owns them, and ptxas would serialize the wgmma)
#pragma unroll
        for (int i = 0; i < 16; i++) pin(fr[i]);
        wg_fence();
#pragma unroll
        for (int s = 0; s < WBK / 16; s++) wgmma_rs_m64n256k16(acc, fr + 4 * s, db + 2 * s);
        wg_commit();
        wg_wait<1>();  // panel p - 1's wgmma are done: nx is free
#pragma unroll
        for (int i = 0; i < 16; i++) pin(nx[i]);
        if (p + 1 < np2) {
            decode(nx);
            load_raw(p + 2);
        }
    };
    // An even number of panels (an odd count gets a panel of zeros, which adds exact zeros): no wgmma
    // under a branch, where the accumulators would pass through a control-flow merge (ptxas then reads them
    // early and serializes every wgmma).
    for (int p = 0; p < np2; p += 2) {
        panel(p, frA, frB);
        panel(p + 1, frB, frA);
    }
    wg_wait<0>();
#pragma unroll
    for (int i = 0; i < 128; i++) pin(acc[i]);

    // epilogue: column j of the accumulators is gathered row 8 (j / 4) + 2 t + (j & 1) of the tile
    const bool st0 = in0, st1 = in1;
#pragma unroll
    for (int j = 0; j < 32; j++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int r = 8 * j + 2 * t + e;
            if (r >= nrows) continue;
            u16* orow = out + ((i64)tl.y + r) * m;
            if (GATEUP) {
                if (st0) orow[c0] = (u16)bf16_bits(situ_tab(situ, acc[4 * j + e], acc[4 * j + 2 + e]));
            } else {
                if (st0) orow[c0] = (u16)bf16_bits(acc[4 * j + e]);
                if (st1) orow[c1] = (u16)bf16_bits(acc[4 * j + 2 + e]);
            }
        }
    }
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// Launch (k_experts_gateup_wg, k_experts_down_wg): blockDim 256, W_SMEM_BYTES of dynamic shared memory,
// gridDim tiles * ncol blocks (block b: row tile b / ncol, column tile b % ncol; ncol = ceil(ffn / 64) for
// gate/up, ceil(latent / 128) for down), a tile table of experts.cu's form with tiles of up to 256 rows.
// The _nodec forms skip decoding (wrong values: they time the rest of the kernel; tests only, compiled
// under POTATO_DEV_KERNELS). Compiled for sm_90a
// only; elsewhere the kernels exist and do nothing, and the Go side never launches them (Backend.wgOK).
#define W_GATEUP(name, dec)                                                                                     \
    extern "C" __global__ void __launch_bounds__(W_THREADS, 1)                                                 \
        name(u16* h, const u16* zs, const int4* tiles, const u64* wp, int ncol, int ffn, int latent,            \
             const float* situ) {                                                                               \
        experts_wg<true, dec>(h, zs, tiles, wp, ncol, ffn, latent, situ);                                       \
    }
#define W_DOWN(name, dec)                                                                                    \
    extern "C" __global__ void __launch_bounds__(W_THREADS, 1)                                              \
        name(u16* h2, const u16* h, const int4* tiles, const u64* wp, int ncol, int latent, int ffn) {       \
        experts_wg<false, dec>(h2, h, tiles, wp, ncol, latent, ffn, nullptr);                                \
    }
W_GATEUP(k_experts_gateup_wg, X_DEC)
W_DOWN(k_experts_down_wg, X_DEC)
#ifdef POTATO_DEV_KERNELS
W_GATEUP(k_experts_gateup_wg_nodec, DEC_NONE)
W_DOWN(k_experts_down_wg_nodec, DEC_NONE)
#endif
