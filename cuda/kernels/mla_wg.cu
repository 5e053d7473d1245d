// mla_wg.cu: MLA's attention (K3_SPEC.md 5.3; the contract is mla_tc.cu's header and cuda/mla.go MLA) on
// Hopper's warpgroup MMA (wgmma, sm_90a only), for BF16 precision. mla_tc.cu's kernel (mma.sync) stays
// for other devices and Options.MLAMmaSync; both take k_mla_prep's bfloat16 keys and values, the same
// tiles, key parts and state layout, so cuda/mla_tc.go launches either.
//
// A block is one warpgroup (4 warps of 16 query rows) per (query tile of 64 rows, head), as in mla_tc.cu,
// and a row's arithmetic is the same statement: S = Q K^T over qk chunks of 16 ascending (one wgmma
// m64n64k16 a chunk, the query fragments from registers, the block's 64 keys from shared memory), the
// online softmax of mla.cuh on the accumulators (wgmma's accumulator layout a warp is mma.sync's), then
// P V per chunk of 16 keys ascending, hi then lo (wgmma m64n128k16, P from registers, the values from
// shared memory taken MN-major by the transpose flag). Keys and values are staged by cp.async in the
// 128-byte swizzle, two blocks at a time: a key block is QKP / 64 panels of 64 keys x 128 bytes (K-major
// for S), a value block VP / 64 such panels (MN-major for P V).
//
// Differences from mla_tc.cu that change no output: every block applies the causal mask (keys past a row
// exist only in the diagonal block, so elsewhere it masks nothing), which keeps the block free of
// branches, and the diagonal block adds the e = 0 of every masked key to P V for all four warps (mma.sync
// skipped the chunks of 16 keys none of a warp's rows can see): a zero added to an accumulator that is not
// -0 leaves it unchanged. wgmma sums a chunk of 16 products as mma.sync does: on the H200 the two kernels
// gave the same bits for every value (TestMLAWGAgainstMmaSync, run 79), and every result is batch, slice
// and part invariant for mla_tc.cu's reasons.
//
// Versions (H200, 96 heads, 128 + 64 / 128; TestMLATiming, causal TFLOP/s of 320 flops a pair; mla_tc.cu's
// version 4 in the same run: 183 at 4 x 4,096 tokens, 177 at 16 x 4,096):
//   5. (this file, numbered after mla_tc.cu's 1-4) one warpgroup a block, each group of wgmma waited for
//      before the softmax that reads it (two blocks an SM interleave their softmax and MMAs), 81 KiB of
//      shared memory at K3's head sizes: 226 TFLOP/s at 4 x 4,096, 222 at 16 x 4,096 (9.1 and 37.2 ms);
//      in the k3-layer bench at 262,144 tokens the MLA op 218.0 -> 181.5 ms a mla layer (run 79). ptxas:
//      255 registers and 88 bytes of spills at 192 / 128 (the query fragments alone hold 48), no wgmma
//      serialized.
//      Next: the query tile in shared memory (wgmma with both operands from descriptors) to free the 48
//      registers, then the next block's S issued before this block's softmax (FlashAttention-3's overlap
//      within a warpgroup), which needs the second S accumulator those registers pay for.
#include "common.cuh"
#include "mla.cuh"
#include "wgmma.cuh"

#define MLA_WG_PANEL (MLA_BN * 128)  // bytes of a staged block's 128-byte column panel: 64 halves x 64 rows

template <int QKP, int VP>
__device__ __forceinline__ void mla_wg(float* out, const float* q, const u16* kb, const u16* vb, const int* tasks,
                                       int heads, int h0, i64 rows, int qk, int vdim, float c, int bf, i64 qlo,
                                       i64 klo, i64 khi, float* st, i64 st0) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(QKP % 64 == 0 && VP % 64 == 0, "head sizes in panels of 64");
    constexpr int NT = MLA_BN / 8, VT = VP / 8, QC = QKP / 16;
    constexpr u32 KBYTES = (QKP / 64) * MLA_WG_PANEL, VBYTES = (VP / 64) * MLA_WG_PANEL;
    extern __shared__ __align__(1024) unsigned char mla_wg_smem[];
    const u32 sK = (smem_u32(mla_wg_smem) + 1023u) & ~1023u;  // 2 stages of keys, then 2 of values
    const u32 sV = sK + 2 * KBYTES;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    const int hl = blockIdx.y, h = h0 + hl;
    const i64 start = tasks[3 * blockIdx.x], t0 = tasks[3 * blockIdx.x + 1], t1 = tasks[3 * blockIdx.x + 2];
    const u16* kh = kb + (i64)hl * rows * QKP;
    const u16* vh = vb + (i64)hl * rows * VP;
    const i64 qcols = (i64)heads * qk, ocols = (i64)heads * vdim;
    const i64 ra = t0 + warp * 16 + g, rb = ra + 8;  // this lane's two query rows
    // rows before qlo (the slice before's) are neither read nor written: zero fragments, as in mla_tc.cu
    const bool va = ra >= qlo && ra < t1, vbv = rb >= qlo && rb < t1;
    const i64 rq = t0 > qlo ? t0 : qlo;
    u32 qa[QC][4];
    mla_q_frags<QC>(qa, q, ra, rb, va, vbv, rq, qcols, h, qk, t4);

    // stage the keys and values of the block at row kb0 (rows from t1 on: zeros): 16-byte chunk ch of
    // row r goes to panel ch / 8, chunk ch % 8 of the panel's row r in the swizzle
    auto load = [&](int stage, i64 kb0) {
        constexpr int KCH = QKP / 8, VCH = VP / 8;  // 16-byte chunks a row
        const u32 ks = sK + stage * KBYTES, vs = sV + stage * VBYTES;
#pragma unroll
        for (int i = 0; i < MLA_BN * KCH / MLA_TC_THREADS; i++) {
            const int e = tid + i * MLA_TC_THREADS, r = e / KCH, ch = e - r * KCH;
            const i64 s = kb0 + r;
            const bool ok = s < t1;
            cp_async16(ks + (u32)(ch >> 3) * MLA_WG_PANEL + swz(r, ch & 7), kh + (ok ? s : 0) * QKP + ch * 8, ok);
        }
#pragma unroll
        for (int i = 0; i < MLA_BN * VCH / MLA_TC_THREADS; i++) {
            const int e = tid + i * MLA_TC_THREADS, r = e / VCH, ch = e - r * VCH;
            const i64 s = kb0 + r;
            const bool ok = s < t1;
            cp_async16(vs + (u32)(ch >> 3) * MLA_WG_PANEL + swz(r, ch & 7), vh + (ok ? s : 0) * VP + ch * 8, ok);
        }
        cp_async_commit();
    };

    float o[VT][4];
#pragma unroll
    for (int j = 0; j < VT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[j][e] = 0.0f;
    float ma = MLA_NEG_INF, mb = MLA_NEG_INF, la = 0.0f, lb = 0.0f;

    // one key block at row kb0, staged at ks, vs; no branch, so that ptxas keeps each group of wgmma
    // asynchronous (an accumulator through a control-flow merge serializes them: experts_wg.cu)
    auto block = [&](u32 ks, u32 vs, i64 kb0) {
        const int lima = (int)(ra - kb0), limb = (int)(rb - kb0);  // keys of the block past these are masked
        float s[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = 0.0f;
        wg_fence();
#pragma unroll
        for (int kc = 0; kc < QC; kc++)  // qk chunk kc: panel kc / 4, 32-byte step kc % 4 of its rows
            wgmma_rs_m64n64k16<0>(&s[0][0], qa[kc], wg_desc(ks + (u32)(kc >> 2) * MLA_WG_PANEL) + 2 * (kc & 3));
        wg_commit();
        wg_wait<0>();
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) pin(s[n][e]);

        mla_softmax<NT, VT, true>(s, o, ma, mb, la, lb, c, lima, limb, t4);

        u32 ah[MLA_BN / 16][4], al[MLA_BN / 16][4];
#pragma unroll
        for (int kc = 0; kc < MLA_BN / 16; kc++) mla_p_frags<NT>(s, kc, ah[kc], al[kc]);
        wg_fence();
#pragma unroll
        for (int kc = 0; kc < MLA_BN / 16; kc++) {  // keys 16 kc ..: 16 rows of every value panel
            const u64 dv = wg_desc_mn(vs + (u32)kc * 2048u, MLA_WG_PANEL);
            if constexpr (VP == 128) {
                wgmma_rs_m64n128k16<1>(&o[0][0], ah[kc], dv);  // hi before lo
                wgmma_rs_m64n128k16<1>(&o[0][0], al[kc], dv);
            } else {
                wgmma_rs_m64n64k16<1>(&o[0][0], ah[kc], dv);
                wgmma_rs_m64n64k16<1>(&o[0][0], al[kc], dv);
            }
        }
        wg_commit();
        wg_wait<0>();
#pragma unroll
        for (int j = 0; j < VT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) pin(o[j][e]);
    };

    // key parts (mla_tc.cu version 3): the same walk and state layout
    const int nblk = (int)((t1 - start + MLA_BN - 1) / MLA_BN);
    int jb0 = 0, jb1 = nblk;
    bool restore = false, save = false;
    float* mine = nullptr;
    if (start == 0 && st != nullptr) {
        jb0 = (int)(klo / MLA_BN);
        if (khi >= 0) jb1 = (int)(khi / MLA_BN);
        restore = jb0 > 0;
        save = khi >= 0;
        mine = st + ((((t0 - st0) / MLA_BM) * heads + h) * MLA_TC_THREADS + tid) * (i64)(VT * 4 + 4);
    }
    if (restore) mla_state_load<VT>(mine, o, ma, mb, la, lb);
    load(jb0 & 1, start + (i64)jb0 * MLA_BN);
    for (int jb = jb0; jb < jb1; jb++) {
        const i64 kb0 = start + (i64)jb * MLA_BN;
        if (jb + 1 < jb1) {
            load((jb + 1) & 1, kb0 + MLA_BN);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_async_shared();  // this thread's landed copies, visible to wgmma
        __syncthreads();       // everyone's
        block(sK + (u32)(jb & 1) * KBYTES, sV + (u32)(jb & 1) * VBYTES, kb0);
        __syncthreads();  // the stage is read before the next iteration's copies overwrite it
    }
    if (save) {
        mla_state_store<VT>(mine, o, ma, mb, la, lb);
        return;
    }
    mla_store<VT>(out, o, la, lb, ra, rb, va, vbv, ocols, h, vdim, t4, bf);
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// Launch (each): mla_tc.cu's arguments, grid and block; dynamic shared memory 2 * 64 * (QKP + VP) * 2 +
// 1,024 bytes (the stages and the alignment of the first to a swizzle atom). The suffix is QKP_VP.
// Compiled for sm_90a only; elsewhere the kernels exist and do nothing, and the Go side never launches them
// (Backend.wgOK).
#define MLA_WG_KERNEL(QKP, VP)                                                                                   \
    extern "C" __global__ void __launch_bounds__(MLA_TC_THREADS) k_mla_wg_##QKP##_##VP(                         \
        float* out, const float* q, const u16* kb, const u16* vb, const int* tasks, int heads, int h0, i64 rows, \
        int qk, int vdim, float c, int bf, i64 qlo, i64 klo, i64 khi, float* st, i64 st0) {                      \
        mla_wg<QKP, VP>(out, q, kb, vb, tasks, heads, h0, rows, qk, vdim, c, bf, qlo, klo, khi, st, st0);        \
    }

MLA_WG_KERNEL(64, 64)
MLA_WG_KERNEL(128, 128)
MLA_WG_KERNEL(192, 128)
