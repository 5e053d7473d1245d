// mla_tc.cu: the MLA op (causal softmax attention per sequence and head without positions, K3_SPEC.md
// 5.3) on the tensor cores, for BF16 precision, flash-attention style. mla.cu (version 1, CUDA cores)
// stays for FP32 precision, Options.NoTensorCores and head sizes no instantiation below covers.
//
// In BF16 precision q, kv and ks hold bfloat16 values (the ops contract: activations are rounded), so
// reading them as bfloat16 is exact and q.k on mma.sync bf16 -> f32 multiplies exactly. They may reach
// the kernels unrounded (a MatMul's rounding deferred to its reader, cuda/deferred.go): the conversion to
// bfloat16 rounds to nearest even, which is that rounding.
//
// Per query row t of a sequence starting at row t0 and per head (the contract, cuda/mla.go MLA):
//   keys are walked in blocks of BN = 64 rows anchored at t0; block b holds keys t0 + 64b .. t0 + 64b + 63.
//   S_s  = the tensor cores' float32 sum of query[i] * key_s[i], i in qk chunks of 16 ascending (exact
//          products; the first chunk added to +0, each next chunk to the running sum; zero-padded to
//          QKP dimensions)
//   x_s  = float32(S_s * c), c = float32(log2(e) / sqrt(qk)); x_s = -Inf for s > t
//   per block: m' = max(m, max_s x_s) (m = -Inf before the first block), alpha = ex2(m - m'),
//          e_s = ex2(x_s - m') (ex2.approx.ftz.f32), e_s split into hi = bf16(e_s) and lo = bf16(e_s - hi)
//          (e_s - hi is exact; hi + lo = e_s within 2^-17 relative),
//          acc_j = acc_j * alpha, then per chunk of 16 keys ascending: acc_j += hi . v_j (one mma), then
//          acc_j += lo . v_j (a second mma),
//          lsum[q] = lsum[q] * alpha + sum of its 16 e_s in ascending key order, per lane q = 0..3 of the
//          row's quad (lane q holds keys 8n + 2q, 8n + 2q + 1 of the block, n = 0..7);
//   at the end: l = (lsum[0] + lsum[1]) + (lsum[2] + lsum[3]), out[t, h*vdim + j] = rounded(acc_j / l).
// Every step depends only on t - t0 and the sequence's own rows: query tiles of BM = 64 rows are also
// anchored at t0, so a row is at the same place of the same tile whatever the wave, and the mma of one
// row never mixes in another row. Results are therefore batch invariant.
//
// Why hi + lo for p.v: rounding e_s to bfloat16 alone moves each term by up to 2^-9 relative, an error of
// the size of the output's own bfloat16 rounding, so (an estimate, not measured) a large share of the
// outputs, a third or more, would land one ulp away from the CPU backend's (which keeps p in float32),
// past the 5% that cuda's agreement tests allow; with the split the error is 2^-17 and on the H200 0.1 to
// 0.3% of the outputs differ from the CPU backend, each by one bfloat16 ulp. The second mma costs 128 of
// the 448 mma flops per score pair.
//
// Masked keys: keys after t inside the diagonal block (rows of the same tile) enter the p.v mma with
// e_s = 0, so a non-finite value in such a row would make t's output NaN (0 * Inf) where the CPU backend
// never reads that row. Activations are finite in any replay that means anything; rows from the tile's
// end on (the next sequence's) are zero-filled, never read.
//
// Versions:
//   2. (this file; 1 is mla.cu) k_mla_prep copies the keys (nope slice of kv, then ks) and values of a
//      group of heads into bfloat16 arrays [head][row][QKP] and [head][row][VP] (zero-padded; one warp a
//      row); k_mla_tc runs one block of 4 warps per (query tile of 64 rows, head), each warp 16 query
//      rows with its Q fragments in registers; key and value blocks of 64 rows are staged by cp.async
//      into a two-stage shared-memory ring (rows padded by 8 halves: ldmatrix's 8 row addresses hit
//      distinct banks), read with ldmatrix (keys) and ldmatrix.trans (values); S and P never leave
//      registers (the S accumulator layout is P's A-fragment layout). The block body is compiled twice:
//      without masks or branches for the blocks before the diagonal (a first cut with the diagonal's
//      tests inside every block ran at 104 TFLOP/s instead of 180: the branches split the mma stream),
//      and with them for the diagonal block, where a warp also skips the chunks of 16 keys none of its
//      rows can see (their e_s are 0: the skip adds nothing). 229 registers (NVRTC 11.8's ptxas), no spills,
//      2 blocks of 86 KiB shared memory per SM at K3's head sizes.
//   3. A sequence's keys may come in parts, one launch each (a slice continuing a long sequence expands
//      the earlier keys a chunk at a time instead of all at once, cuda/slice.go): the tiles of the
//      sequence at row 0 walk only the key blocks of the part, from the registers the previous launch
//      saved (o, m, and the per-lane l of every thread: 68 floats at VP = 128), saving them again
//      unless the part is the last. The blocks are walked in the same order with the same arithmetic, so
//      the output has the bits of one launch over all the keys.
//   4. qlo: the query rows of a tile that belong to the slice before (a continued sequence's first tile)
//      are masked in the kernel instead of padding q with zero rows in a copy of the slice's whole q and
//      writing the output through a scratch copied back (cuda/mla.go mlaQueries): two copies of a
//      slice's q and output less, the same fragments (zeros) and bits.
//   5-7 are mla_wg.cu: the same statement on sm_90a's wgmma, the same bits, 1.41x this kernel's speed at
//      16 x 4,096 tokens (run 82); this kernel stays for other devices and Options.MLAMmaSync.
//   The keys from the latent (run 110, cuda/mla_latent.go): where cuBLASLt runs, kv_b's batched calls
//      write the nope keys and the values straight into k_mla_prep's arrays (bfloat16, rounded by the
//      epilogue) and k_mla_shared_keys adds the shared key columns and the padding: no float32 kv, no
//      prep copy. Both kernels read the arrays as before; 0 of 805 million values differ from the prep
//      path at K3's sizes, and MLA with its keys takes 28.2 ms instead of 31.8 at 16 x 4,096 tokens.
//      Next here: 32 query rows a warp (half the shared-memory reads per mma; needs Q re-read from shared
//      memory to fit the registers).
#include "common.cuh"
#include "mla.cuh"

#define MLA_PAD 8  // halves of padding at the end of each shared-memory row

__device__ __forceinline__ void mma_bf16(float* c, const u32* a, const u32* b) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ldsm_x4 loads four 8x8 bfloat16 matrices; lane l gives the shared address of row l%8 of matrix l/8.
__device__ __forceinline__ void ldsm_x4(u32* r, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

__device__ __forceinline__ void ldsm_x4_trans(u32* r, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

// mla_bool is a compile-time flag for a generic lambda.
template <bool B>
struct mla_bool {
    static constexpr bool value = B;
};

// k_mla_prep writes, for the heads h0 .. h0+hg-1 (local index hl = h - h0) and every row r < rows:
// kb[(hl*rows + r)*qkp + i] = key i (kv's nope slice, then ks, then zeros up to qkp) and
// vb[(hl*rows + r)*vp + j] = value j (zeros from vdim to vp), as bfloat16 (round to nearest even: exact for
// bfloat16 values). Rows r < n0 come from kv, ks; rows from n0 on from kv2, ks2 (their row r - n0): a
// slice's own keys after a carried prefix's, read where they are. One warp per (hl, r) = blockIdx.x * 8 +
// warp, lanes over pairs of halves (qkp, vp even). Launch: blockDim 256, gridDim ceil(hg * rows / 8).
extern "C" __global__ void __launch_bounds__(256) k_mla_prep(u32* kb, u32* vb, const float* kv, const float* ks, i64 rows,
                                                             int heads, int h0, int hg, int nope, int shared, int vdim,
                                                             int qkp, int vp, const float* kv2, const float* ks2, i64 n0) {
    i64 hr = (i64)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (hr >= (i64)hg * rows) return;
    int lane = threadIdx.x & 31;
    int kvw = nope + vdim, qk = nope + shared, wk = qkp / 2, wv = vp / 2;
    i64 hl = hr / rows, r = hr - hl * rows;
    const bool first = r < n0;
    const i64 rr = first ? r : r - n0;
    const float* src = (first ? kv : kv2) + rr * ((i64)heads * kvw) + (h0 + hl) * kvw;
    const float* srs = (first ? ks : ks2) + rr * shared;
    for (int p = lane; p < wk; p += 32) {
        int i = 2 * p;
        float x0 = i < nope ? src[i] : i < qk ? srs[i - nope] : 0.0f;
        float x1 = i + 1 < nope ? src[i + 1] : i + 1 < qk ? srs[i + 1 - nope] : 0.0f;
        kb[hr * wk + p] = pack_bf16(x0, x1);
    }
    for (int p = lane; p < wv; p += 32) {
        int j = 2 * p;
        float x0 = j < vdim ? src[nope + j] : 0.0f;
        float x1 = j + 1 < vdim ? src[nope + j + 1] : 0.0f;
        vb[hr * wv + p] = pack_bf16(x0, x1);
    }
}

// k_mla_shared_keys completes the bfloat16 key and value arrays of k_mla_prep's layout where kv_b's
// batched GEMM wrote the keys' nope columns and the values straight from the latent (cuda/mla_latent.go):
// for planes hl < hg and rows r < rows (hr = hl * rows + r), key columns nope .. qkp-1 get ks's row
// (rows r < n0 from ks, the others from ks2's row r - n0) up to qk = nope + shared and zeros after it,
// value columns vdim .. vp-1 zeros: k_mla_prep's values for them (ks rounded to nearest even as it
// is read). A thread writes 8 columns (16 bytes) of one plane and row; nope, vdim, qkp and vp are
// multiples of 8. Launch: blockDim 256, gridDim ceil(hg * rows * w / 256), w = (qkp - nope + vp - vdim) / 8.
extern "C" __global__ void __launch_bounds__(256) k_mla_shared_keys(uint4* kb, uint4* vb, const float* ks, const float* ks2,
                                                                    i64 rows, i64 n0, int hg, int nope, int shared,
                                                                    int qkp, int vdim, int vp) {
    const int wk = (qkp - nope) / 8, w = wk + (vp - vdim) / 8;
    const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (i64)hg * rows * w) return;
    const i64 hr = idx / w;
    const int j = (int)(idx - hr * w);
    if (j >= wk) {
        vb[(hr * vp + vdim) / 8 + (j - wk)] = make_uint4(0u, 0u, 0u, 0u);
        return;
    }
    const i64 r = hr % rows;
    const float* src = r < n0 ? ks + r * shared : ks2 + (r - n0) * shared;
    u32 p[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const int i = 8 * j + 2 * e;  // the column past nope
        const float x0 = i < shared ? src[i] : 0.0f;
        const float x1 = i + 1 < shared ? src[i + 1] : 0.0f;
        p[e] = pack_bf16(x0, x1);
    }
    kb[(hr * qkp + nope) / 8 + j] = make_uint4(p[0], p[1], p[2], p[3]);
}

// mla_tc: tasks[3*b .. 3*b+2] = (sequence start row, first query row t0, end row t1) of tile b =
// blockIdx.x, t1 - t0 <= 64 and t0 - start a multiple of 64; head h = h0 + blockIdx.y, whose keys and
// values are kb, vb at local index blockIdx.y (k_mla_prep's layout). qk <= QKP, vdim <= VP.
template <int QKP, int VP>
__device__ __forceinline__ void mla_tc(float* out, const float* q, const u16* kb, const u16* vb, const int* tasks,
                                       int heads, int h0, i64 rows, int qk, int vdim, float c, int bf, i64 qlo,
                                       i64 klo, i64 khi, float* st, i64 st0) {
    constexpr int KST = QKP + MLA_PAD, VST = VP + MLA_PAD;  // shared-memory row strides in halves
    constexpr int NT = MLA_BN / 8, VT = VP / 8, QC = QKP / 16;
    extern __shared__ __align__(16) unsigned char mla_smem[];
    const u32 sK = (u32)__cvta_generic_to_shared(mla_smem);  // 2 stages of MLA_BN x KST halves
    const u32 sV = sK + 2 * MLA_BN * KST * 2;                 // then 2 stages of MLA_BN x VST halves

    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    int hl = blockIdx.y, h = h0 + hl;
    i64 start = tasks[3 * blockIdx.x], t0 = tasks[3 * blockIdx.x + 1], t1 = tasks[3 * blockIdx.x + 2];
    const u16* kh = kb + (i64)hl * rows * QKP;
    const u16* vh = vb + (i64)hl * rows * VP;
    i64 qcols = (i64)heads * qk, ocols = (i64)heads * vdim;
    i64 ra = t0 + warp * 16 + g, rb = ra + 8;  // this lane's two query rows
    // rows before qlo (a slice's continued sequence: rows of the slice before) are neither read nor
    // written; their fragments hold zeros, as the zero rows that used to pad q did
    bool va = ra >= qlo && ra < t1, vbv = rb >= qlo && rb < t1;
    const i64 rq = t0 > qlo ? t0 : qlo; // a row inside q, for the addresses of rows not read

    // the query fragments (A of S = Q K^T): rows ra, rb; dimensions 2*t4, +1 and 2*t4 + 8, +9 of each chunk
    u32 qa[QC][4];
    mla_q_frags<QC>(qa, q, ra, rb, va, vbv, rq, qcols, h, qk, t4);

    // stage the keys and values of the block at row kb0 (rows from t1 on: zeros)
    auto load = [&](int stage, i64 kb0) {
        constexpr int KCH = QKP / 8, VCH = VP / 8;  // 16-byte chunks a row
        u32 ks = sK + stage * MLA_BN * KST * 2, vs = sV + stage * MLA_BN * VST * 2;
        for (int e = tid; e < MLA_BN * KCH; e += MLA_TC_THREADS) {
            int r = e / KCH, ch = e - r * KCH;
            i64 s = kb0 + r;
            bool ok = s < t1;
            cp_async16(ks + (r * KST + ch * 8) * 2, kh + (ok ? s : 0) * QKP + ch * 8, ok);
        }
        for (int e = tid; e < MLA_BN * VCH; e += MLA_TC_THREADS) {
            int r = e / VCH, ch = e - r * VCH;
            i64 s = kb0 + r;
            bool ok = s < t1;
            cp_async16(vs + (r * VST + ch * 8) * 2, vh + (ok ? s : 0) * VP + ch * 8, ok);
        }
        cp_async_commit();
    };

    float o[VT][4], ma, mb, la, lb;
    mla_init<VT>(o, ma, mb, la, lb);
    int mi = lane >> 3, mr = lane & 7;  // ldmatrix: this lane addresses row mr of matrix mi

    // one key block at row kb0, staged at ks, vs; DIAG: the last block, which holds the tile's own rows
    // (masked where s > t; a warp skips the chunks of 16 keys that none of its rows can see, whose e_s
    // would all be 0). Outside it no key is masked and no branch breaks the mma stream.
    auto block = [&](auto diag, u32 ks, u32 vs, i64 kb0) {
        constexpr bool DIAG = decltype(diag)::value;
        const int nvis = DIAG ? min(MLA_BN, (int)(t0 - kb0) + warp * 16 + 16) : MLA_BN;
        const int lima = (int)(ra - kb0), limb = (int)(rb - kb0);  // in the diagonal block: keys > lim are masked

        // S = Q K^T: s[n][0..1] row ra, keys 8n + 2*t4, +1; s[n][2..3] row rb
        float s[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < QC; kc++) {
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                if (!DIAG || np * 16 < nvis) {
                    u32 b[4];  // keys np*16 + (mi/2)*8 + mr, dims kc*16 + (mi%2)*8: {b0, b1} of two n-tiles
                    ldsm_x4(b, ks + ((np * 16 + (mi >> 1) * 8 + mr) * KST + kc * 16 + (mi & 1) * 8) * 2);
                    mma_bf16(s[2 * np], qa[kc], b);
                    mma_bf16(s[2 * np + 1], qa[kc], b + 2);
                }
            }
        }

        // scale, mask, the running max and the block's exponentials
        mla_softmax<NT, VT, DIAG>(s, o, ma, mb, la, lb, c, lima, limb, t4);

        // acc += P V per chunk of 16 keys: the S accumulators of n-tiles 2kc, 2kc+1 are P's A fragment
#pragma unroll
        for (int kc = 0; kc < MLA_BN / 16; kc++) {
            if (!DIAG || kc * 16 < nvis) {
                u32 ah[4], al[4];
                mla_p_frags<NT>(s, kc, ah, al);
#pragma unroll
                for (int vp = 0; vp < VT / 2; vp++) {
                    u32 b[4];  // keys kc*16 + (mi%2)*8 + mr, dims vp*16 + (mi/2)*8, transposed
                    ldsm_x4_trans(b, vs + ((kc * 16 + (mi & 1) * 8 + mr) * VST + vp * 16 + (mi >> 1) * 8) * 2);
                    mma_bf16(o[2 * vp], ah, b);  // hi before lo for each accumulator
                    mma_bf16(o[2 * vp + 1], ah, b + 2);
                    mma_bf16(o[2 * vp], al, b);
                    mma_bf16(o[2 * vp + 1], al, b + 2);
                }
            }
        }
    };

    // A sequence whose keys come in parts (version 3): the tiles of the sequence at row 0 walk only the
    // blocks klo/64 .. khi/64 - 1 (khi < 0: to the end), starting from the state an earlier launch saved
    // and saving theirs when the walk stops short of the end (mla_walk_of).
    const mla_walk w = mla_walk_of<VT>(start, t0, t1, klo, khi, st, st0, heads, h, tid);
    const int nblk = w.nblk, jb0 = w.jb0, jb1 = w.jb1;
    if (w.restore) mla_state_load<VT>(w.mine, o, ma, mb, la, lb);
    load(jb0 & 1, start + (i64)jb0 * MLA_BN);
    for (int jb = jb0; jb < jb1; jb++) {
        i64 kb0 = start + (i64)jb * MLA_BN;
        if (jb + 1 < jb1) {
            load((jb + 1) & 1, kb0 + MLA_BN);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        u32 ks = sK + (jb & 1) * MLA_BN * KST * 2, vs = sV + (jb & 1) * MLA_BN * VST * 2;
        if (jb + 1 < nblk) block(mla_bool<false>{}, ks, vs, kb0);
        else block(mla_bool<true>{}, ks, vs, kb0);
        __syncthreads();
    }
    if (w.save) {  // registers as they stand: the next launch goes on from exactly here
        mla_state_store<VT>(w.mine, o, ma, mb, la, lb);
        return;
    }
    mla_store<VT>(out, o, la, lb, ra, rb, va, vbv, ocols, h, vdim, t4, bf);
}

// Launch (each): blockDim 128, gridDim (tiles, hg), dynamic shared memory 2 * 64 * (QKP + 8 + VP + 8) * 2
// bytes; c = float32(log2(e) / sqrt(qk)). The suffix is QKP_VP. Query rows below qlo are not read (their
// fragments are zeros) and not written: a slice's continued sequence has its first tile start in the
// slice before (q and out are indexed by key row). st == nullptr: every tile walks its whole
// sequence (klo, khi, st0 unused). Otherwise the tiles of the sequence at row 0 walk keys klo .. khi - 1
// (multiples of 64; khi < 0: to the end), restoring their state from st when klo > 0 and saving it there
// instead of writing out when khi >= 0: st holds VT * 4 + 4 floats a thread, per (tile (t0 - st0) / 64,
// head, thread).
#define MLA_TC_KERNEL(QKP, VP)                                                                                   \
    extern "C" __global__ void __launch_bounds__(MLA_TC_THREADS) k_mla_tc_##QKP##_##VP(                         \
        float* out, const float* q, const u16* kb, const u16* vb, const int* tasks, int heads, int h0, i64 rows, \
        int qk, int vdim, float c, int bf, i64 qlo, i64 klo, i64 khi, float* st, i64 st0) {                      \
        mla_tc<QKP, VP>(out, q, kb, vb, tasks, heads, h0, rows, qk, vdim, c, bf, qlo, klo, khi, st, st0);        \
    }

MLA_TC_KERNEL(64, 64)
MLA_TC_KERNEL(128, 128)
MLA_TC_KERNEL(192, 128)
