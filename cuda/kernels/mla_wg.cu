// mla_wg.cu: MLA's attention (K3_SPEC.md 5.3; the contract is mla_tc.cu's header and cuda/mla.go MLA) on
// Hopper's warpgroup MMA (wgmma, sm_90a only), for BF16 precision. mla_tc.cu's kernel (mma.sync) stays
// for other devices and Options.MLAMmaSync; both take k_mla_prep's bfloat16 keys and values and keep the
// key parts' state per 64-row tile in the same layout, so cuda/mla_tc.go launches either.
//
// A block is two warpgroups, each one of mla_tc.cu's 64-row query tiles (4 warps of 16 rows), over tiles
// of 128 rows anchored at the sequence start, for one head; both warpgroups read each staged key and value
// block. A row's arithmetic is mla_tc.cu's statement: S = Q K^T over qk chunks of 16 ascending (one wgmma
// m64n64k16 a chunk, the query tile and the block's 64 keys both from shared memory), the online softmax
// of mla.cuh on the accumulators (wgmma's accumulator layout a warp is mma.sync's), then P V per chunk of
// 16 keys ascending, hi then lo (wgmma m64n128k16, P from registers, the values taken MN-major by the
// transpose flag). The query tile, keys and values sit in shared memory in the 128-byte swizzle: the
// query tile and a key block as panels of 64 rows x 128 bytes (K-major), a value block likewise (MN-major
// for P V); keys and values are staged by cp.async two blocks at a time.
//
// Differences from mla_tc.cu that change no output: the last two blocks of a walk apply the causal mask
// (keys past a row exist only in the diagonal blocks), in a loop of their own; the diagonal block adds the
// e = 0 of every masked key to P V for all four warps (mma.sync skipped the chunks of 16 keys none of a
// warp's rows can see), and the first warpgroup also walks the second's diagonal block, past all of its
// rows, where mla.cuh keeps alpha at 1 and every e is 0: a zero added to an accumulator that is not -0
// leaves it unchanged. wgmma sums a chunk of 16 products as
// mma.sync does: on the H200 the two kernels gave the same bits for every value (TestMLAWGAgainstMmaSync,
// runs 79-82), and every result is batch, slice and part invariant for mla_tc.cu's reasons.
//
// Versions (H200, 96 heads, 128 + 64 / 128; TestMLATiming, causal TFLOP/s at 320 flops a pair; mla_tc.cu's
// version 4 in the same runs: 181-183 at 4 x 4,096 tokens, 176-179 at 16 x 4,096):
//   5. one warpgroup a block, the query fragments in registers (wgmma with A from registers for S), each
//      group of wgmma waited for before the softmax that reads it (two blocks an SM interleave their
//      softmax and MMAs): 226 TFLOP/s at 4 x 4,096, 222 at 16 x 4,096; the bench's MLA op at 262,144
//      tokens 218.0 -> 181.5 ms a mla layer (run 79). 255 registers, 88 bytes of spills at 192 / 128.
//   6. the query tile in shared memory, FlashAttention-3's order within the warpgroup (block j's S
//      issued, the accumulators rescaled by block j - 1's alpha, block j - 1's P V issued, block j's
//      softmax beside it; S started by the instruction's scale, since zeroing its accumulators while a
//      P V was in flight made ptxas serialize every wgmma, run 80): 237 and 226 TFLOP/s (run 81), 3%.
//   7. two warpgroups a block sharing each staged block: half the L2 reads a query row (per
//      64 keys a warpgroup read 40 KB for 3.7 MFLOP of tensor work, about 3.6 TB/s of L2 across the chip
//      in version 6): 254 TFLOP/s at 4 x 4,096, 253 at 16 x 4,096 (version 5 in the same call 226, 222);
//      the bench's MLA op 162.3 ms a mla layer (run 82). 228 registers, no spills, 129 KiB of shared
//      memory: one block an SM.
//   8. (this file) the causal mask only in the last two key blocks of a walk (the first warpgroup's
//      diagonal and the second's), the blocks before them in a loop of their own without it, as mla_tc.cu
//      compiles its blocks twice (a branch in the loop would serialize the wgmma): 4 x 4,096 8.04 -> 7.53
//      ms (257 -> 274 TFLOP/s), 16 x 4,096 32.66 -> 31.25 (253 -> 264), 64 x 4,096 136.6 -> 130.2;
//      a mla+moe layer 1.0563 -> 1.0470 s in the bench at 262,144 tokens (run 104). The same bits
//      (TestMLAWGAgainstMmaSync).
//      Next: TMA multicast of each staged block to a cluster of two blocks of the same head and sequence
//      (the L2's reads halved again; three warpgroups a block do not fit the registers), then a producer
//      warp and the warpgroups' softmax and MMAs scheduled in turn (FlashAttention-3's ping-pong).
//      The tensor cores do 448 flops a score pair where 320 are counted
//      (P V's hi and lo halves, mla_tc.cu's split), so at 253 TFLOP/s counted they run about 354.
#include "common.cuh"
#include "mla.cuh"
#include "wgmma.cuh"

#define MLA_WG_PANEL (MLA_BN * 128)  // bytes of a staged block's 128-byte column panel: 64 halves x 64 rows
#define MLA_WG_ROWS 128                // query rows of a block: two warpgroups of 64
#define MLA_WG_THREADS 256

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// sts128 stores four words at a shared-memory address.
__device__ __forceinline__ void sts128(u32 addr, uint4 v) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}
#endif

// A block's staged rows (MLA_BN rows of CH 16-byte chunks, from row kb0 of src; rows from t1 on: zeros)
// go to a stage as 64-row panels of 128 bytes in the swizzle: chunk ch of row r to panel ch / 8, chunk
// ch % 8 of the panel's row r. The block's 256 threads take MLA_BN * CH / 256 chunks each, thread tid
// chunk e = tid + 256 i; which chunks and where they go are the same for every block, so each thread
// packs its own once (mla_wg_piece) and a stage costs it a few instructions a chunk (mla_wg_stage).

// mla_wg_piece is chunk e = tid + 256 i of a block packed: its byte offset in a stage (low 16 bits) and
// its element offset from the block's first row (high 16 bits; mla_wg asserts that both fit).
template <int CH>
__device__ __forceinline__ u32 mla_wg_piece(int tid, int i) {
    const int e = tid + i * MLA_WG_THREADS, r = e / CH, ch = e - r * CH;
    return ((u32)(ch >> 3) * MLA_WG_PANEL + swz(r, ch & 7)) | ((u32)(r * CH * 8 + ch * 8) << 16);
}

// mla_wg_stage stages the block at row kb0 of src at dst with this thread's packed chunks pc (zeros for
// rows from t1 on, whose chunks lie at or past (t1 - kb0) * CH * 8 elements). One cp.async group.
template <int CH, int N>
__device__ __forceinline__ void mla_wg_stage(u32 dst, const u16* src, i64 kb0, i64 t1, const u32 (&pc)[N]) {
    const u16* blk = src + kb0 * (CH * 8);
    const u32 lim = (u32)min(t1 - kb0, (i64)MLA_BN) * (CH * 8);
#pragma unroll
    for (int i = 0; i < N; i++) {
        const u32 off = pc[i] >> 16;
        const bool ok = off < lim;
        cp_async16(dst + (pc[i] & 0xffffu), ok ? blk + off : src, ok);
    }
    cp_async_commit();
}

template <int QKP, int VP>
__device__ __forceinline__ void mla_wg(float* out, const float* q, const u16* kb, const u16* vb, const int* tasks,
                                       int heads, int h0, i64 rows, int qk, int vdim, float c, int bf, i64 qlo,
                                       i64 klo, i64 khi, float* st, i64 st0) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(QKP % 64 == 0 && VP % 64 == 0, "head sizes in panels of 64");
    static_assert(MLA_BN * QKP <= 65536 && (QKP / 64) * MLA_WG_PANEL <= 65536, "a chunk's offsets in 16 bits each");
    constexpr int NT = MLA_BN / 8, VT = VP / 8, QC = QKP / 16, KSTEPS = MLA_BN / 16;
    // shared memory: the query tile (a 64-row half a warpgroup), 2 stages of keys, 2 of values (each a
    // multiple of 1,024 bytes)
    constexpr u32 QHALF = (QKP / 64) * MLA_WG_PANEL, KBYTES = QHALF, VBYTES = (VP / 64) * MLA_WG_PANEL;
    extern __shared__ __align__(1024) unsigned char mla_wg_smem[];
    const u32 sQ = (smem_u32(mla_wg_smem) + 1023u) & ~1023u;
    const u32 sK = sQ + 2 * QHALF, sV = sK + 2 * KBYTES;

    const int tid = threadIdx.x, wg = tid >> 7, wtid = tid & 127, lane = tid & 31, warp = wtid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int hl = blockIdx.y, h = h0 + hl;
    const i64 start = tasks[3 * blockIdx.x], t0 = tasks[3 * blockIdx.x + 1], t1 = tasks[3 * blockIdx.x + 2];
    const i64 t0w = t0 + MLA_BM * wg;  // this warpgroup's 64-row tile (mla_tc.cu's tile of the same rows)
    const u16* kh = kb + (i64)hl * rows * QKP;
    const u16* vh = vb + (i64)hl * rows * VP;
    const i64 qcols = (i64)heads * qk, ocols = (i64)heads * vdim;
    const i64 ra = t0w + warp * 16 + g, rb = ra + 8;  // this lane's two query rows
    // rows before qlo (the slice before's) and from t1 on are neither read nor written: zero rows of the
    // query tile, as mla_tc.cu's zero fragments
    const bool va = ra >= qlo && ra < t1, vbv = rb >= qlo && rb < t1;

    // the query tile, rounded to bfloat16 (the rounding a MatMul may have deferred here; exact on rounded
    // values), K-major in the swizzle: row r in half r / 64, its 16-byte chunk ch dimensions 8 ch .. 8 ch + 7
    {
        constexpr int QCH = QKP / 8;
#pragma unroll 4
        for (int i = 0; i < MLA_WG_ROWS * QCH / MLA_WG_THREADS; i++) {
            const int e = tid + i * MLA_WG_THREADS, r = e / QCH, ch = e - r * QCH;
            const i64 row = t0 + r;
            const bool ok = row >= qlo && row < t1;
            const float* p = q + (ok ? row : 0) * qcols + (i64)h * qk + 8 * ch;
            float x[8];
#pragma unroll
            for (int k = 0; k < 8; k++) x[k] = ok && 8 * ch + k < qk ? p[k] : 0.0f;
            sts128(sQ + (u32)(r >> 6) * QHALF + (u32)(ch >> 3) * MLA_WG_PANEL + swz(r & 63, ch & 7),
                   make_uint4(pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]), pack_bf16(x[4], x[5]), pack_bf16(x[6], x[7])));
        }
    }

    // stage the keys (K) or values (V) of the block at row kb0 (mla_wg_stage, this thread's chunks packed once)
    constexpr int NPK = MLA_BN * (QKP / 8) / MLA_WG_THREADS, NPV = MLA_BN * (VP / 8) / MLA_WG_THREADS;
    u32 pk[NPK], pv[NPV];
#pragma unroll
    for (int i = 0; i < NPK; i++) pk[i] = mla_wg_piece<QKP / 8>(tid, i);
#pragma unroll
    for (int i = 0; i < NPV; i++) pv[i] = mla_wg_piece<VP / 8>(tid, i);
    auto load_k = [&](int stage, i64 kb0) { mla_wg_stage<QKP / 8>(sK + stage * KBYTES, kh, kb0, t1, pk); };
    auto load_v = [&](int stage, i64 kb0) { mla_wg_stage<VP / 8>(sV + stage * VBYTES, vh, kb0, t1, pv); };
    // S = Q K^T of this warpgroup's query rows and the keys staged at ks into sd (its first k step starts
    // the sum), qk chunk kc: panel kc / 4, 32-byte step kc % 4 of its rows (both operands); issued and
    // committed as one group
    auto issue_s = [&](float (&sd)[NT][4], u32 ks) {
        wg_fence();
#pragma unroll
        for (int kc = 0; kc < QC; kc++) {
            const u32 off = (u32)(kc >> 2) * MLA_WG_PANEL;
            wgmma_ss_m64n64k16(&sd[0][0], wg_desc(sQ + (u32)wg * QHALF + off) + 2 * (kc & 3), wg_desc(ks + off) + 2 * (kc & 3),
                               kc > 0);
        }
        wg_commit();
    };
    // P V of the P fragments ph, pl and the values staged at vs, accumulated in o: keys 16 kc .. are 16 rows
    // of every value panel, hi before lo; issued and committed as one group
    auto issue_pv = [&](float (&od)[VT][4], const u32 (&ph)[KSTEPS][4], const u32 (&pl)[KSTEPS][4], u32 vs) {
        wg_fence();
#pragma unroll
        for (int kc = 0; kc < KSTEPS; kc++) {
            const u64 dv = wg_desc_mn(vs + (u32)kc * 2048u, MLA_WG_PANEL);
            if constexpr (VP == 128) {
                wgmma_rs_m64n128k16<1>(&od[0][0], ph[kc], dv);
                wgmma_rs_m64n128k16<1>(&od[0][0], pl[kc], dv);
            } else {
                wgmma_rs_m64n64k16<1>(&od[0][0], ph[kc], dv);
                wgmma_rs_m64n64k16<1>(&od[0][0], pl[kc], dv);
            }
        }
        wg_commit();
    };

    float o[VT][4], ma, mb, la, lb;
    mla_init<VT>(o, ma, mb, la, lb);

    // key parts (mla_tc.cu version 3): the same walk and state layout, a warpgroup's state where mla_tc.cu
    // keeps that of its 64-row tile; the block walks the keys of its second tile's diagonal, which lie
    // past every row of the first (their alpha is 1, their e 0: mla_softmax_stats), so the first
    // tile's rows get the bits of their own walk. A warpgroup whose tile is past the sequence (t0w >= t1)
    // runs on zero rows and stores nothing.
    const bool rows_in = t0w < t1;
    const mla_walk w = mla_walk_of<VT>(start, t0w, t1, klo, khi, st, st0, heads, h, wtid);
    const int jb0 = w.jb0, jb1 = w.jb1;
    if (w.restore && rows_in) mla_state_load<VT>(w.mine, o, ma, mb, la, lb);
    // jb0 < jb1 for every tile (a part's keys end at or after its start's block, cuda/slice_mla.go): the
    // first block runs before the loop without a test, since a branch around a wgmma serializes them all

    // The pipeline (FlashAttention-3's overlap within a warpgroup, its order): block j's S runs on the
    // tensor cores while the accumulators take block j - 1's alpha, then block j - 1's P V runs while
    // block j's softmax does; both are waited for before the next block, whose keys and the values of j
    // were staged a whole block earlier (stage j & 1 holds keys j and values j). The first block's S and
    // softmax come before the loop, the last block's P V after it.
    float s[NT][4];  // S of the current block, then its e
    u32 ah[KSTEPS][4], al[KSTEPS][4];
    float alpha_a, alpha_b;
    load_k(jb0 & 1, start + (i64)jb0 * MLA_BN);
    cp_async_wait<0>();
    fence_async_shared();  // the query tile's stores and this thread's landed copies, visible to wgmma
    __syncthreads();
    load_v(jb0 & 1, start + (i64)jb0 * MLA_BN);
    if (jb0 + 1 < jb1) load_k((jb0 + 1) & 1, start + (i64)(jb0 + 1) * MLA_BN);  // a key part's rows end at khi
    issue_s(s, sK + (u32)(jb0 & 1) * KBYTES);
    wg_wait<0>();
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) pin(s[n][e]);
    mla_softmax_stats<NT, true>(s, ma, mb, la, lb, alpha_a, alpha_b, c, (int)(ra - start - (i64)jb0 * MLA_BN),
                                (int)(rb - start - (i64)jb0 * MLA_BN), t4);
#pragma unroll
    for (int kc = 0; kc < KSTEPS; kc++) mla_p_frags<NT>(s, kc, ah[kc], al[kc]);
    // block jb of the walk after the first: masked where a key may lie past a row of the block's, the last
    // two blocks of the walk (the first warpgroup's diagonal and the second's, past all of the first's rows);
    // a block before them has every key at or before every row, where the mask changes nothing and only
    // costs its compares (two loops, not a branch: a branch around the wgmma would serialize them)
    auto step = [&](int jb, auto masked) {
        const i64 kb0 = start + (i64)jb * MLA_BN;
        const int cur = jb & 1, prv = cur ^ 1;
        cp_async_wait<0>();  // keys jb and values jb - 1
        fence_async_shared();
        __syncthreads();
        // keys jb + 1 into the stage of keys jb - 1 (their S is done), values jb into that of values
        // jb - 2 (their P V is done)
        if (jb + 1 < jb1) load_k(prv, kb0 + MLA_BN);
        load_v(cur, kb0);
        issue_s(s, sK + (u32)cur * KBYTES);
        mla_rescale<VT>(o, alpha_a, alpha_b);
        issue_pv(o, ah, al, sV + (u32)prv * VBYTES);
        wg_wait<1>();  // S of jb is done, P V of jb - 1 may not be
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) pin(s[n][e]);
        mla_softmax_stats<NT, decltype(masked)::value>(s, ma, mb, la, lb, alpha_a, alpha_b, c, (int)(ra - kb0),
                                                        (int)(rb - kb0), t4);
        wg_wait<0>();  // P V of jb - 1 is done: its fragments may change
#pragma unroll
        for (int j = 0; j < VT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) pin(o[j][e]);
#pragma unroll
        for (int kc = 0; kc < KSTEPS; kc++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                pin(ah[kc][i]);
                pin(al[kc][i]);
            }
            mla_p_frags<NT>(s, kc, ah[kc], al[kc]);
        }
    };
    const int jm = max(jb0 + 1, jb1 - 2);  // the first block that may need the mask
    for (int jb = jb0 + 1; jb < jm; jb++) step(jb, mla_mask<false>{});
    for (int jb = jm; jb < jb1; jb++) step(jb, mla_mask<true>{});
    cp_async_wait<0>();  // values jb1 - 1
    fence_async_shared();
    __syncthreads();
    mla_rescale<VT>(o, alpha_a, alpha_b);
    issue_pv(o, ah, al, sV + (u32)((jb1 - 1) & 1) * VBYTES);
    wg_wait<0>();
#pragma unroll
    for (int j = 0; j < VT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) pin(o[j][e]);
    if (!rows_in) return;
    if (w.save) {
        mla_state_store<VT>(w.mine, o, ma, mb, la, lb);
        return;
    }
    mla_store<VT>(out, o, la, lb, ra, rb, va, vbv, ocols, h, vdim, t4, bf);
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// Launch (each): mla_tc.cu's arguments, with tiles of up to 128 rows (t1 - t0 <= 128, t0 - start a
// multiple of 128), blockDim 256, gridDim (tiles, hg); dynamic shared memory 64 * (4 QKP + 2 VP) * 2 +
// 1,024 bytes (the query tile, the stages, and the alignment of the first to a swizzle atom). The key
// parts' state st is mla_tc.cu's, per 64-row tile from the tile at st0. The suffix is QKP_VP. Compiled
// for sm_90a only; elsewhere the kernels exist and do nothing, and the Go side never launches them
// (Backend.wgOK).
#define MLA_WG_KERNEL(QKP, VP)                                                                                   \
    extern "C" __global__ void __launch_bounds__(MLA_WG_THREADS, 1) k_mla_wg_##QKP##_##VP(                         \
        float* out, const float* q, const u16* kb, const u16* vb, const int* tasks, int heads, int h0, i64 rows, \
        int qk, int vdim, float c, int bf, i64 qlo, i64 klo, i64 khi, float* st, i64 st0) {                      \
        mla_wg<QKP, VP>(out, q, kb, vb, tasks, heads, h0, rows, qk, vdim, c, bf, qlo, klo, khi, st, st0);        \
    }

MLA_WG_KERNEL(64, 64)
MLA_WG_KERNEL(128, 128)
MLA_WG_KERNEL(192, 128)
