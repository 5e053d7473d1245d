// mla.cuh: what MLA's two tensor-core kernels share (mla_tc.cu on mma.sync, mla_wg.cu on sm_90a's wgmma):
// the tile and block sizes, the query fragments, one key block's step of the online softmax, the
// accumulators' start, the key blocks a tile walks, and the state a tile saves between key parts,
// restores and finally writes out. Both kernels hold a tile's
// arithmetic in the same registers: a warp's 16 query rows, lane 4g + t4 holding rows g and g + 8 (ra,
// rb), the score of key 8n + 2*t4 + e%2 of a block in s[n][e] (e < 2: row ra) and value column
// 8j + 2*t4 + e%2 in o[j][e]: mma.sync's m16n8 accumulator layout, which is also wgmma's for a warp's
// 16 rows of the warpgroup's 64. So the softmax and the epilogue below are one piece of code for both.
#pragma once
#include "common.cuh"

#define MLA_BM 64  // query rows of a tile: 4 warps of 16
#define MLA_BN 64  // keys of a block
#define MLA_TC_THREADS 128
#define MLA_NEG_INF __int_as_float(0xff800000)

// pack_bf16 packs two values for an mma fragment: a (the lower index) in the low half.
__device__ __forceinline__ u32 pack_bf16(float a, float b) { return bf16_bits(a) | (bf16_bits(b) << 16); }

// split2 writes hi = {bf16(a), bf16(b)} and lo = {bf16(a - hi_a), bf16(b - hi_b)}, a in the low halves.
__device__ __forceinline__ void split2(float a, float b, u32& hi, u32& lo) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(hi) : "f"(b), "f"(a));
    float ra = __fsub_rn(a, __uint_as_float(hi << 16));
    float rb = __fsub_rn(b, __uint_as_float(hi & 0xffff0000u));
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(lo) : "f"(rb), "f"(ra));
}

__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// mla_q_frags loads the query fragments of this lane's rows ra, rb for head h (the A operand of S =
// Q K^T): dimensions 2*t4, +1 and 2*t4 + 8, +9 of each chunk of 16, zero past qk and for a row that is not
// read (va, vb false: past the tile's end or before qlo; rq is a row inside q for its address), rounded
// to bfloat16 as they load (the rounding a MatMul may have deferred to this kernel).
template <int QC>
__device__ __forceinline__ void mla_q_frags(u32 (&qa)[QC][4], const float* q, i64 ra, i64 rb, bool va, bool vb, i64 rq,
                                            i64 qcols, int h, int qk, int t4) {
    const float* pa = q + (va ? ra : rq) * qcols + (i64)h * qk;
    const float* pb = q + (vb ? rb : rq) * qcols + (i64)h * qk;
#pragma unroll
    for (int kc = 0; kc < QC; kc++) {
        int d = kc * 16 + 2 * t4;
        float x[8];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            x[e] = va && d + e < qk ? pa[d + e] : 0.0f;
            x[2 + e] = vb && d + e < qk ? pb[d + e] : 0.0f;
            x[4 + e] = va && d + 8 + e < qk ? pa[d + 8 + e] : 0.0f;
            x[6 + e] = vb && d + 8 + e < qk ? pb[d + 8 + e] : 0.0f;
        }
        qa[kc][0] = pack_bf16(x[0], x[1]);
        qa[kc][1] = pack_bf16(x[2], x[3]);
        qa[kc][2] = pack_bf16(x[4], x[5]);
        qa[kc][3] = pack_bf16(x[6], x[7]);
    }
}

// mla_mask is a compile-time flag passed as a value (a generic lambda's argument): whether a key block's
// softmax applies the causal mask.
template <bool B>
struct mla_mask {
    static constexpr bool value = B;
};

// mla_softmax_stats is one key block's step of the online softmax for this lane's two rows, on the
// block's scores s (the tensor cores' sums), up to the accumulators: x = float32(s * c), masked to -Inf
// where MASK and the key's place in the block is past lim (lima for row ra, limb for rb); the rows' new
// maxima over the quad; alpha = ex2(m - m') (returned in alpha_a, alpha_b; 1 where lim < 0, a block
// whose every key is past the row); s becomes e = ex2(x - m');
// the lane's sums la, lb = l * alpha + its 16 e in ascending key order. A row whose maximum is still -Inf
// subtracts 0 instead (no -Inf - -Inf).
template <int NT, bool MASK>
__device__ __forceinline__ void mla_softmax_stats(float (&s)[NT][4], float& ma, float& mb, float& la, float& lb,
                                                  float& alpha_a, float& alpha_b, float c, int lima, int limb,
                                                  int t4) {
    float xa = MLA_NEG_INF, xb = MLA_NEG_INF;
#pragma unroll
    for (int n = 0; n < NT; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float x = __fmul_rn(s[n][e], c);
            if (MASK) x = n * 8 + 2 * t4 + (e & 1) > (e < 2 ? lima : limb) ? MLA_NEG_INF : x;
            s[n][e] = x;
            if (e < 2) xa = fmaxf(xa, x);
            else xb = fmaxf(xb, x);
        }
    }
    xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, 1));
    xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, 2));
    xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, 1));
    xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, 2));
    float na = fmaxf(ma, xa), nb = fmaxf(mb, xb);
    float ba = na == MLA_NEG_INF ? 0.0f : na, bb = nb == MLA_NEG_INF ? 0.0f : nb;  // no -Inf - -Inf
    // a row with every key of the block masked (lim < 0: a block past the row's diagonal, which mla_wg.cu's
    // second warpgroup walks for the first) keeps o and l exactly: alpha 1, every e 0
    alpha_a = lima < 0 ? 1.0f : ex2(__fsub_rn(ma, ba));
    alpha_b = limb < 0 ? 1.0f : ex2(__fsub_rn(mb, bb));
    ma = na;
    mb = nb;
    float psa = 0.0f, psb = 0.0f;
#pragma unroll
    for (int n = 0; n < NT; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p = ex2(__fsub_rn(s[n][e], e < 2 ? ba : bb));
            s[n][e] = p;
            if (e < 2) psa = __fadd_rn(psa, p);
            else psb = __fadd_rn(psb, p);
        }
    }
    la = __fadd_rn(__fmul_rn(la, alpha_a), psa);
    lb = __fadd_rn(__fmul_rn(lb, alpha_b), psb);
}

// mla_rescale is the step's o *= alpha (row ra's columns by alpha_a, rb's by alpha_b).
template <int VT>
__device__ __forceinline__ void mla_rescale(float (&o)[VT][4], float alpha_a, float alpha_b) {
#pragma unroll
    for (int j = 0; j < VT; j++) {
        o[j][0] = __fmul_rn(o[j][0], alpha_a);
        o[j][1] = __fmul_rn(o[j][1], alpha_a);
        o[j][2] = __fmul_rn(o[j][2], alpha_b);
        o[j][3] = __fmul_rn(o[j][3], alpha_b);
    }
}

// mla_softmax is mla_softmax_stats then mla_rescale: the whole step where nothing else runs between.
template <int NT, int VT, bool MASK>
__device__ __forceinline__ void mla_softmax(float (&s)[NT][4], float (&o)[VT][4], float& ma, float& mb, float& la,
                                            float& lb, float c, int lima, int limb, int t4) {
    float alpha_a, alpha_b;
    mla_softmax_stats<NT, MASK>(s, ma, mb, la, lb, alpha_a, alpha_b, c, lima, limb, t4);
    mla_rescale<VT>(o, alpha_a, alpha_b);
}

// mla_p_frags splits the e of keys 16 kc .. 16 kc + 15 (n-tiles 2 kc, 2 kc + 1 of s) into the hi and lo
// A fragments of P V: the accumulator layout of S is the A-fragment layout of P.
template <int NT>
__device__ __forceinline__ void mla_p_frags(const float (&s)[NT][4], int kc, u32 (&ah)[4], u32 (&al)[4]) {
    split2(s[2 * kc][0], s[2 * kc][1], ah[0], al[0]);
    split2(s[2 * kc][2], s[2 * kc][3], ah[1], al[1]);
    split2(s[2 * kc + 1][0], s[2 * kc + 1][1], ah[2], al[2]);
    split2(s[2 * kc + 1][2], s[2 * kc + 1][3], ah[3], al[3]);
}

// mla_init starts a tile's accumulators: o = 0, the running maxima at -inf, the running sums at 0.
template <int VT>
__device__ __forceinline__ void mla_init(float (&o)[VT][4], float& ma, float& mb, float& la, float& lb) {
#pragma unroll
    for (int j = 0; j < VT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[j][e] = 0.0f;
    ma = mb = MLA_NEG_INF;
    la = lb = 0.0f;
}

// mla_walk is the key blocks a 64-row tile walks (mla_tc.cu version 3: a sequence whose keys come in
// parts): blocks jb0 .. jb1 - 1 of the nblk blocks of its sequence, restoring its state from mine first
// when restore, and saving it there instead of writing its outputs when save.
struct mla_walk {
    int nblk, jb0, jb1;
    bool restore, save;
    float* mine;
};

// mla_walk_of gives the walk of the tile at t0 (its sequence from start to t1): every block, unless the
// launch has key parts (st != nullptr) and the tile is of the sequence at row 0; then the blocks klo / 64
// .. khi / 64 - 1 (khi < 0: to the end), with this thread's state (slot of MLA_TC_THREADS, VT * 4 + 4
// floats) for 64-row tile (t0 - st0) / 64 and head h.
template <int VT>
__device__ __forceinline__ mla_walk mla_walk_of(i64 start, i64 t0, i64 t1, i64 klo, i64 khi, float* st, i64 st0,
                                                int heads, int h, int slot) {
    mla_walk w;
    w.nblk = (int)((t1 - start + MLA_BN - 1) / MLA_BN);
    w.jb0 = 0;
    w.jb1 = w.nblk;
    w.restore = w.save = false;
    w.mine = nullptr;
    if (start == 0 && st != nullptr) {
        w.jb0 = (int)(klo / MLA_BN);
        if (khi >= 0) w.jb1 = (int)(khi / MLA_BN);
        w.restore = w.jb0 > 0;
        w.save = khi >= 0;
        w.mine = st + ((((t0 - st0) / MLA_BM) * heads + h) * MLA_TC_THREADS + slot) * (i64)(VT * 4 + 4);
    }
    return w;
}

// mla_state_load and mla_state_store move a thread's o, ma, mb, la, lb to and from its VT * 4 + 4 floats
// of the key parts' state (mla_tc.cu version 3): registers as they stand, so the next launch goes on from
// exactly there.
template <int VT>
__device__ __forceinline__ void mla_state_load(const float* mine, float (&o)[VT][4], float& ma, float& mb, float& la,
                                               float& lb) {
#pragma unroll
    for (int j = 0; j < VT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[j][e] = mine[j * 4 + e];
    ma = mine[VT * 4];
    mb = mine[VT * 4 + 1];
    la = mine[VT * 4 + 2];
    lb = mine[VT * 4 + 3];
}
template <int VT>
__device__ __forceinline__ void mla_state_store(float* mine, const float (&o)[VT][4], float ma, float mb, float la,
                                                float lb) {
#pragma unroll
    for (int j = 0; j < VT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) mine[j * 4 + e] = o[j][e];
    mine[VT * 4] = ma;
    mine[VT * 4 + 1] = mb;
    mine[VT * 4 + 2] = la;
    mine[VT * 4 + 3] = lb;
}

// mla_store writes this lane's outputs: l = (lsum[0] + lsum[1]) + (lsum[2] + lsum[3]) over the quad,
// out[r, h*vdim + col] = rounded(o / l) for the rows it owns (va, vb) and the columns below vdim.
template <int VT>
__device__ __forceinline__ void mla_store(float* out, const float (&o)[VT][4], float la, float lb, i64 ra, i64 rb,
                                          bool va, bool vb, i64 ocols, int h, int vdim, int t4, int bf) {
    la = __fadd_rn(la, __shfl_xor_sync(0xffffffffu, la, 1));
    la = __fadd_rn(la, __shfl_xor_sync(0xffffffffu, la, 2));
    lb = __fadd_rn(lb, __shfl_xor_sync(0xffffffffu, lb, 1));
    lb = __fadd_rn(lb, __shfl_xor_sync(0xffffffffu, lb, 2));
#pragma unroll
    for (int j = 0; j < VT; j++) {
        int col = j * 8 + 2 * t4;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            bool ok = e < 2 ? va : vb;
            int cc = col + (e & 1);
            if (ok && cc < vdim) {
                i64 r = e < 2 ? ra : rb;
                out[r * ocols + (i64)h * vdim + cc] = rnd(__fdiv_rn(o[j][e], e < 2 ? la : lb), bf);
            }
        }
    }
}
