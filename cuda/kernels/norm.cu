// norm.cu: RMSNorm (and its gated form) and the AttnRes mix: row reductions followed by a row update.
//
// Versions:
//   1. one warp per normalised group (RMSNorm) or per row (AttnResMix), 8 warps a block. Sums of a vector
//      run lane-strided (lane l adds elements l, l+32, ... in ascending order, products rounded to float32)
//      and then through warp_sum's fixed butterfly: the order depends on the vector's length only, never on
//      the grid or the number of rows, so every row's bits are the same alone or in any wave. Against
//      replay/cpu (one ascending sum) the norm factors differ at float32 rounding level.
//   2. k_rmsnorm2_* and k_attnres2_* (widths a multiple of 4, 16-byte aligned operands; other shapes stay
//      on version 1): version 1 read each value twice (its sums, then its output: for K3's 7,168-wide rows
//      the second read came from DRAM again, a row per warp and 64 warps an SM being far more than L1
//      holds) with 4-byte loads. Here a thread loads its values once, 16 bytes at a time, into registers
//      (CPT chunks of 4 values a thread), and writes its outputs from them: a value's bytes cross the bus
//      once. RMSNorm groups of up to 1,024 values take one warp each (8 groups a block), wider ones up to
//      8,192 a block of 8 warps; AttnResMix takes a block of 8 warps a row, its first two vectors held in
//      registers and the others read again for the mix (K3's later layers mix up to 9). The sums have a
//      new fixed order: thread t of the group (or row) holds chunks t, t + T, ... (T its threads); four
//      partial sums, one per position in the chunk, each ascending over its chunks, then
//      ((p0 + p1) + (p2 + p3)), warp_sum's butterfly, and for a block the 8 warp sums added in ascending
//      warp order. It depends on the width only (the instance is chosen by the width), so batch
//      invariance holds as before; the factors move at float32 rounding level against version 1. Every
//      output statement is version 1's. RMSNorm's (and the gated form's) outputs can also be written as
//      bfloat16 (nb, rows of the output's width): the kept copy of narrow.go that the next MatMul reads,
//      8 bytes more a chunk instead of a conversion pass (read 16, write 8) before the GEMM.
//   3. k_attnres_norm3_* (the fused mix and norm, rows over 1,024 values): version 2's statements with one
//      barrier for all the scores instead of four a vector and two around thread 0's softmax (attnres3_mix
//      says how); faster up to four vectors, slower past them, where cuda/mixnorm.go keeps version 2
//      (run 121). Tried and dropped with it (run 120): the narrow norms four groups a warp, all four
//      groups' loads before any sum (GatedRMSNorm 3.26 -> 4.10 ms; cuda/records/rmsnorm_groups.diff).
#include "common.cuh"

// k_rmsnorm: for each group q of g consecutive values of x (groups = rows * cols / g), with w 1 x g:
//   inv = rsqrt(sum_sq / g + eps); out[d] = rnd(rnd(v[d] * inv) * w[d]);
//   and when gate is not null: out[d] = rnd(out[d] * sigmoid(rnd(gate[d]))) (the gate rounded as loaded:
//   the output gate's projection with its rounding deferred, cuda/deferred.go).
// Launch: blockDim 256 (8 warps), gridDim ceil(groups / 8).
extern "C" __global__ void k_rmsnorm(float* out, const float* x, const float* w, const float* gate, i64 groups, int g,
                                     float eps, int bf) {
    int lane = threadIdx.x & 31;
    i64 q = blockIdx.x * (i64)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (q >= groups) return;
    const float* v = x + q * g;
    float ss = lane_sum_sq(v, g, lane, bf); // x rounded as read
    float inv = rsqrt_f(__fadd_rn(__fdiv_rn(ss, (float)g), eps));
    float* o = out + q * g;
    for (int d = lane; d < g; d += 32) {
        float y = rnd(__fmul_rn(rnd(__fmul_rn(rnd(v[d], bf), inv), bf), w[d]), bf);
        if (gate != 0) y = rnd(__fmul_rn(y, sigmoid_f(rnd(gate[q * g + d], bf))), bf);
        o[d] = y;
    }
}

// k_attnres: AttnResMix (K3_SPEC.md 5.1) of n vectors vs[0..n) (each rows x cols) per row r:
//   inv_i = rsqrt(sum_sq(v_i) / cols + 1e-5); score_i = dot(wg, v_i) * inv_i;
//   p = softmax(score) (max shift, e_i = exp(score_i - max), sum ascending i, p_i = e_i / sum);
//   out[r, d] = rnd(sum_i p_i * v_i[d]) (ascending i); p[r, i] = p_i.
// Every lane computes the same scalars (warp_sum gives all lanes one value); lane 0 stores them.
// Launch: blockDim 256 (8 warps), gridDim ceil(rows / 8).
extern "C" __global__ void k_attnres(float* out, float* p, const float* const* vs, int n, const float* wg, i64 rows,
                                     int cols, int bf) {
    int lane = threadIdx.x & 31;
    i64 r = blockIdx.x * (i64)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;
    float* pr = p + r * n;
    float m = 0.0f;
    for (int i = 0; i < n; i++) {
        const float* v = vs[i] + r * cols;
        float ss = 0.0f, dot = 0.0f;
        for (int d = lane; d < cols; d += 32) {
            ss = __fadd_rn(ss, __fmul_rn(v[d], v[d]));
            dot = __fadd_rn(dot, __fmul_rn(wg[d], v[d]));
        }
        ss = warp_sum(ss);
        dot = warp_sum(dot);
        float inv = rsqrt_f(__fadd_rn(__fdiv_rn(ss, (float)cols), 1e-5f));
        float s = __fmul_rn(dot, inv);
        m = i == 0 ? s : fmaxf(m, s);
        if (lane == 0) pr[i] = s;
    }
    __syncwarp();
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        float e = exp_f(__fsub_rn(pr[i], m));
        sum = __fadd_rn(sum, e);
        __syncwarp();
        if (lane == 0) pr[i] = e;
    }
    __syncwarp();
    for (int i = 0; i < n; i++) {
        float e = pr[i];
        __syncwarp();
        if (lane == 0) pr[i] = __fdiv_rn(e, sum);
    }
    __syncwarp();
    float* o = out + r * cols;
    for (int d = lane; d < cols; d += 32) {
        float acc = 0.0f;
        for (int i = 0; i < n; i++) acc = __fadd_rn(acc, __fmul_rn(pr[i], vs[i][r * cols + d]));
        o[d] = rnd(acc, bf);
    }
}

// chunk_sq_sum and chunk_dot_sum are a thread's partial sums over its n float4 chunks (version 2's order:
// one partial per position in the chunk, ascending over the chunks, then (p0 + p1) + (p2 + p3); products
// rounded first, as lane_sum_sq). chunk_dot_sum reads w's chunks t, t + T, ... (read-only, L1-cached:
// every row reads the same w).
template <int CPT>
__device__ __forceinline__ float chunk_sq_sum(const float4 (&v)[CPT], int n) {
    float a = 0.0f, b = 0.0f, c = 0.0f, d = 0.0f;
#pragma unroll
    for (int j = 0; j < CPT; j++) {
        if (j < n) {
            a = __fadd_rn(a, __fmul_rn(v[j].x, v[j].x));
            b = __fadd_rn(b, __fmul_rn(v[j].y, v[j].y));
            c = __fadd_rn(c, __fmul_rn(v[j].z, v[j].z));
            d = __fadd_rn(d, __fmul_rn(v[j].w, v[j].w));
        }
    }
    return __fadd_rn(__fadd_rn(a, b), __fadd_rn(c, d));
}

template <int CPT>
__device__ __forceinline__ float chunk_dot_sum(const float4 (&v)[CPT], const float4* __restrict__ w, int t, int T, int n) {
    float a = 0.0f, b = 0.0f, c = 0.0f, d = 0.0f;
#pragma unroll
    for (int j = 0; j < CPT; j++) {
        if (j < n) {
            const float4 wj = __ldg(w + t + j * T);
            a = __fadd_rn(a, __fmul_rn(wj.x, v[j].x));
            b = __fadd_rn(b, __fmul_rn(wj.y, v[j].y));
            c = __fadd_rn(c, __fmul_rn(wj.z, v[j].z));
            d = __fadd_rn(d, __fmul_rn(wj.w, v[j].w));
        }
    }
    return __fadd_rn(__fadd_rn(a, b), __fadd_rn(c, d));
}

// block_sum8 returns, in every thread of a block of 8 warps, the sum of v over the block: warp_sum, then the
// 8 warp sums added in ascending warp order. red holds 8 floats of shared memory; the barriers make it
// reusable by the next call.
__device__ __forceinline__ float block_sum8(float v, float* red) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = red[0];
#pragma unroll
    for (int w = 1; w < 8; w++) s = __fadd_rn(s, red[w]);
    __syncthreads();
    return s;
}

// norm_out4 is k_rmsnorm's output statement for the 4 values of one chunk.
__device__ __forceinline__ float4 norm_out4(float4 v, float4 w, float inv, int bf) {
    return make_float4(rnd(__fmul_rn(rnd(__fmul_rn(v.x, inv), bf), w.x), bf), rnd(__fmul_rn(rnd(__fmul_rn(v.y, inv), bf), w.y), bf),
                       rnd(__fmul_rn(rnd(__fmul_rn(v.z, inv), bf), w.z), bf), rnd(__fmul_rn(rnd(__fmul_rn(v.w, inv), bf), w.w), bf));
}

// gate4 is the gated form's statement for one chunk: rnd(y * sigmoid(rnd(gate))), the gate rounded as
// loaded (a projection's output with its rounding deferred, cuda/deferred.go), by mul_sigmoid_bf4 (the
// double-precision statement's bits, k_rmsnorm's; run 94).
__device__ __forceinline__ float4 gate4(float4 y, float4 g, int bf) {
    g = rnd4(g, bf);
    return mul_sigmoid_bf4(y, g, bf);
}

// store_norm4 writes chunk c of a normed row (base: the row's first value) as float32 to out and as
// bfloat16 to nb, each unless null (cuda/narrow.go: the copy the next MatMul reads, alone for a
// narrow-only output); the values are bfloat16 values, so the copy holds their bits exactly.
__device__ __forceinline__ void store_norm4(float* out, u16* nb, i64 base, int c, float4 y) {
    if (out != 0) ((float4*)(out + base))[c] = y;
    if (nb != 0)
        ((uint2*)(nb + base))[c] = bf16x4_bits(y);
}

// rmsnorm2<W, CPT, PG>: k_rmsnorm (version 2) with W warps a group (1 or 8) and at most CPT chunks of 4
// values a thread: group size g <= 128 * W * CPT, g % 4 == 0, all operands 16-byte aligned. A block of 8
// warps holds 8 / W groups. With PG (the gated form only) a thread loads its gate and weight chunks
// beside its x chunks, before the sums, instead of after them: the same statements, with the gate's
// loads in flight while the group's sum runs (K3's KDA output, groups of 128 over 12,288: one chunk of
// each a thread). Runs 124 and 126: 3.215 -> 3.092, 3.209 -> 3.109 and 3.259 -> 3.089 ms at that shape,
// timed beside the gate-late form in one binary (run 119 had found no gain for the gate alone, without the
// weight, in a separate build: 3.301 -> 3.316). Backend.gateLate keeps the late form for the bits test.
// Launch: blockDim 256, gridDim ceil(groups * W / 8).
// ld_norm4 loads chunk i (4 values) of x rounded in BF16 precision (bf): float32 values rounded as read,
// or bfloat16 bits (KDA's narrow-only output, cuda/kda.go) widened, exact.
__device__ __forceinline__ float4 ld_norm4(const float* x, i64 i, int bf) { return rnd4(((const float4*)x)[i], bf); }
__device__ __forceinline__ float4 ld_norm4(const u16* x, i64 i, int) { return bf16x4_value(((const uint2*)x)[i]); }
template <int W, int CPT, bool PG = false, typename TX = float>
__device__ __forceinline__ void rmsnorm2(float* out, const TX* x, const float* w, const float* gate, i64 groups, int g,
                                         float eps, int bf, u16* nb) {
    __shared__ float red[8];
    const int T = 32 * W;                      // threads of a group
    const int t = threadIdx.x % T;             // this thread's place in its group
    const i64 q = blockIdx.x * (i64)(8 / W) + threadIdx.x / T;
    const bool live = q < groups;              // a block of 8 warps may hold fewer live groups (W == 1 only)
    const int nc = g / 4;                      // chunks of the group
    const int mine = nc > t ? (nc - t + T - 1) / T : 0;  // chunks t, t + T, ... below nc
    const TX* xq = x + (live ? q : 0) * g;
    float4 v[CPT];
#pragma unroll
    for (int j = 0; j < CPT; j++)
        if (live && j < mine) v[j] = ld_norm4(xq, t + j * T, bf);  // x rounded as read (the routed experts' float32 sum)
    float4 gv[PG ? CPT : 1], wv[PG ? CPT : 1];
    if (PG) {
        const float4* g4 = (const float4*)(gate + (live ? q : 0) * g);
#pragma unroll
        for (int j = 0; j < CPT; j++) {
            if (live && j < mine) {
                gv[j] = g4[t + j * T];
                wv[j] = ((const float4*)w)[t + j * T];
            }
        }
    }
    float ss = live ? chunk_sq_sum<CPT>(v, mine) : 0.0f;
    if (W == 1) {
        ss = warp_sum(ss);
    } else {
        ss = block_sum8(ss, red);
    }
    if (!live) return;
    const float inv = rsqrt_f(__fadd_rn(__fdiv_rn(ss, (float)g), eps));
    const float4* w4 = (const float4*)w;
    const float4* g4 = gate != 0 ? (const float4*)(gate + q * g) : 0;
#pragma unroll
    for (int j = 0; j < CPT; j++) {
        if (j < mine) {
            const int c = t + j * T;
            float4 y = norm_out4(v[j], PG ? wv[PG ? j : 0] : w4[c], inv, bf);
            if (PG) {
                y = gate4(y, gv[PG ? j : 0], bf);
            } else if (g4 != 0) {
                y = gate4(y, g4[c], bf);
            }
            store_norm4(out, nb, q * g, c, y); // out null: nb alone receives the output (narrow-only)
        }
    }
}

// K_RMSNORM2(W, CPT) defines k_rmsnorm2_w<W>_c<CPT>; nb, when not null, receives the outputs as bfloat16
// (16-byte aligned, the output's layout), and then out may be null: the copy alone is written
// (cuda/narrow.go, narrow-only outputs).
#define K_RMSNORM2(W, CPT)                                                                                   \
    extern "C" __global__ void __launch_bounds__(256) k_rmsnorm2_w##W##_c##CPT(                              \
        float* out, const float* x, const float* w, const float* gate, i64 groups, int g, float eps, int bf,  \
        u16* nb) {                                                                                           \
        rmsnorm2<W, CPT>(out, x, w, gate, groups, g, eps, bf, nb);                                            \
    }
K_RMSNORM2(1, 1)
K_RMSNORM2(1, 2)
K_RMSNORM2(1, 4)
K_RMSNORM2(1, 8)
K_RMSNORM2(8, 1)
K_RMSNORM2(8, 2)
K_RMSNORM2(8, 4)
K_RMSNORM2(8, 8)

// K_RMSNORM2G(CPT) defines k_rmsnorm2g_w1_c<CPT>: k_rmsnorm2_w1_c<CPT> for the gated form (gate not null)
// with the gate's chunks loaded before the sums (PG above).
#define K_RMSNORM2G(CPT)                                                                                     \
    extern "C" __global__ void __launch_bounds__(256) k_rmsnorm2g_w1_c##CPT(                                 \
        float* out, const float* x, const float* w, const float* gate, i64 groups, int g, float eps, int bf,  \
        u16* nb) {                                                                                           \
        rmsnorm2<1, CPT, true>(out, x, w, gate, groups, g, eps, bf, nb);                                      \
    }
K_RMSNORM2G(1)
K_RMSNORM2G(2)

// K_RMSNORM2GB(CPT) defines k_rmsnorm2gb_w1_c<CPT>: k_rmsnorm2g_w1_c<CPT> over x as bfloat16 bits (8-byte
// aligned rows of g values): KDA's narrow-only output (cuda/kda.go), half the bytes of its float32 values.
#define K_RMSNORM2GB(CPT)                                                                                    \
    extern "C" __global__ void __launch_bounds__(256) k_rmsnorm2gb_w1_c##CPT(                                \
        float* out, const u16* x, const float* w, const float* gate, i64 groups, int g, float eps, int bf,    \
        u16* nb) {                                                                                           \
        rmsnorm2<1, CPT, true, u16>(out, x, w, gate, groups, g, eps, bf, nb);                                 \
    }
K_RMSNORM2GB(1)
K_RMSNORM2GB(2)

// attnres2_mix is version 2's mix of row blockIdx.x into h, the thread's chunks t + 256 j (j < the count it
// returns), rounded: the scores and p (stored to p) as k_attnres2 computes them. sp: 4 * n bytes of shared
// memory; red: block_sum8's.
template <int CPT>
__device__ __forceinline__ int attnres2_mix(float4 (&h)[CPT], float* p, const float* const* vs, int n, const float* wg,
                                            int cols, int bf, float* sp, float* red) {
    const i64 r = blockIdx.x;
    const int t = threadIdx.x;
    const int nc = cols / 4;
    const int mine = nc > t ? (nc - t + 255) / 256 : 0;
    const float4* wg4 = (const float4*)wg;
    float4 a[CPT], b[CPT];
    float m = 0.0f;
    for (int i = 0; i < n; i++) {
        const float4* v4 = (const float4*)(vs[i] + r * cols);
        float4 c[CPT];
#pragma unroll
        for (int j = 0; j < CPT; j++)
            if (j < mine) c[j] = v4[t + j * 256];
        float ss = block_sum8(chunk_sq_sum<CPT>(c, mine), red);
        float dot = block_sum8(chunk_dot_sum<CPT>(c, wg4, t, 256, mine), red);
        float inv = rsqrt_f(__fadd_rn(__fdiv_rn(ss, (float)cols), 1e-5f));
        float s = __fmul_rn(dot, inv);
        m = i == 0 ? s : fmaxf(m, s);
        if (t == 0) sp[i] = s;
        if (i == 0) {
#pragma unroll
            for (int j = 0; j < CPT; j++) a[j] = c[j];
        } else if (i == 1) {
#pragma unroll
            for (int j = 0; j < CPT; j++) b[j] = c[j];
        }
    }
    __syncthreads();
    if (t == 0) { // version 1's softmax statements, on the scores every thread computed alike
        float sum = 0.0f;
        for (int i = 0; i < n; i++) {
            float e = exp_f(__fsub_rn(sp[i], m));
            sum = __fadd_rn(sum, e);
            sp[i] = e;
        }
        for (int i = 0; i < n; i++) {
            sp[i] = __fdiv_rn(sp[i], sum);
            p[r * n + i] = sp[i];
        }
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < CPT; j++) {
        if (j < mine) {
            const int c = t + j * 256;
            float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            for (int i = 0; i < n; i++) {
                float4 v = i == 0 ? a[j] : i == 1 ? b[j] : ((const float4*)(vs[i] + r * cols))[c];
                float pi = sp[i];
                acc.x = __fadd_rn(acc.x, __fmul_rn(pi, v.x));
                acc.y = __fadd_rn(acc.y, __fmul_rn(pi, v.y));
                acc.z = __fadd_rn(acc.z, __fmul_rn(pi, v.z));
                acc.w = __fadd_rn(acc.w, __fmul_rn(pi, v.w));
            }
            h[j] = make_float4(rnd(acc.x, bf), rnd(acc.y, bf), rnd(acc.z, bf), rnd(acc.w, bf));
        }
    }
    return mine;
}

// attnres2<CPT>: k_attnres (version 2), one block of 8 warps a row, cols % 4 == 0, cols <= 1024 * CPT,
// every vector and wg 16-byte aligned. Vectors 0 and 1 stay in registers from their sums to the mix; the
// others are read again for it. The scalars are version 1's statements: the scores (and their max m) by
// every thread alike, the softmax by thread 0, which stores p. Launch: blockDim 256, gridDim rows, 4 * n bytes of dynamic shared
// memory (the scores, then p).
template <int CPT>
__device__ __forceinline__ void attnres2(float* out, float* p, const float* const* vs, int n, const float* wg, i64 rows,
                                         int cols, int bf) {
    extern __shared__ float sp[];
    __shared__ float red[8];
    float4 h[CPT];
    const int mine = attnres2_mix<CPT>(h, p, vs, n, wg, cols, bf, sp, red);
    float4* o4 = (float4*)(out + blockIdx.x * (i64)cols);
#pragma unroll
    for (int j = 0; j < CPT; j++)
        if (j < mine) o4[threadIdx.x + j * 256] = h[j];
}

// K_ATTNRES2(CPT) defines k_attnres2_c<CPT>.
#define K_ATTNRES2(CPT)                                                                                      \
    extern "C" __global__ void __launch_bounds__(256) k_attnres2_c##CPT(                                     \
        float* out, float* p, const float* const* vs, int n, const float* wg, i64 rows, int cols, int bf) {   \
        attnres2<CPT>(out, p, vs, n, wg, rows, cols, bf);                                                     \
    }
K_ATTNRES2(1)
K_ATTNRES2(2)
K_ATTNRES2(4)
K_ATTNRES2(8)

// attnres_norm2<CPT, CPTN>: k_attnres2_c<CPT> and then k_rmsnorm2 over the mixed row (one group, g = cols),
// in one kernel: the mix stays in registers instead of crossing the bus twice (cuda/norm.go
// AttnResMixNorm). The norm runs version 2's statements in its own thread layout, so the bits are those
// of the two kernels: for cols > 1,024 (CPTN == 0) k_rmsnorm2_w8_c<CPT>'s, whose block of 8 warps holds
// the row's chunks as the mix does (chunk t + 256 j); for cols <= 1,024 (CPT == 1) k_rmsnorm2_w1_c<CPTN>'s,
// one warp over chunks t + 32 j, from the mix staged in shared memory. Writes the normed row to nb (and
// out unless null) and p as k_attnres2. Launch: blockDim 256, gridDim rows, dynamic shared memory 4 * n
// bytes (CPTN == 0), else 16 * ceil(n / 4) + 4 * cols.
template <int CPT, int CPTN>
__device__ __forceinline__ void attnres_norm2(float* out, u16* nb, float* p, const float* const* vs, int n,
                                              const float* wg, int cols, const float* w, float eps, int bf) {
    extern __shared__ float sp[];
    __shared__ float red[8];
    float4 h[CPT];
    const int mine = attnres2_mix<CPT>(h, p, vs, n, wg, cols, bf, sp, red);
    const int t = threadIdx.x;
    const i64 base = blockIdx.x * (i64)cols;
    const float4* w4 = (const float4*)w;
    if (CPTN == 0) { // k_rmsnorm2_w8_c<CPT>: x rounded as read, then its sums and outputs
        float4 v[CPT];
#pragma unroll
        for (int j = 0; j < CPT; j++)
            if (j < mine) v[j] = rnd4(h[j], bf);
        const float ss = block_sum8(chunk_sq_sum<CPT>(v, mine), red);
        const float inv = rsqrt_f(__fadd_rn(__fdiv_rn(ss, (float)cols), eps));
#pragma unroll
        for (int j = 0; j < CPT; j++)
            if (j < mine) store_norm4(out, nb, base, t + j * 256, norm_out4(v[j], w4[t + j * 256], inv, bf));
        return;
    }
    float4* row = (float4*)(sp + 4 * ((n + 3) / 4)); // 16-byte aligned, after the scores
    if (mine > 0) row[t] = h[0];                     // CPT == 1: chunk t
    __syncthreads();
    if (t >= 32) return;
    const int nc = cols / 4;
    const int minen = nc > t ? (nc - t + 31) / 32 : 0;
    constexpr int NN = CPTN > 0 ? CPTN : 1; // CPTN == 0 never gets here
    float4 v[NN];
#pragma unroll
    for (int j = 0; j < NN; j++)
        if (j < minen) v[j] = rnd4(row[t + j * 32], bf);
    const float ss = warp_sum(chunk_sq_sum<NN>(v, minen));
    const float inv = rsqrt_f(__fadd_rn(__fdiv_rn(ss, (float)cols), eps));
#pragma unroll
    for (int j = 0; j < NN; j++)
        if (j < minen) store_norm4(out, nb, base, t + j * 32, norm_out4(v[j], w4[t + j * 32], inv, bf));
}

// K_ATTNRES_NORM2(CPT, CPTN) defines k_attnres_norm2_c<CPT>_n<CPTN>.
#define K_ATTNRES_NORM2(CPT, CPTN)                                                                           \
    extern "C" __global__ void __launch_bounds__(256) k_attnres_norm2_c##CPT##_n##CPTN(                      \
        float* out, u16* nb, float* p, const float* const* vs, int n, const float* wg, int cols,             \
        const float* w, float eps, int bf) {                                                                  \
        attnres_norm2<CPT, CPTN>(out, nb, p, vs, n, wg, cols, w, eps, bf);                                    \
    }
K_ATTNRES_NORM2(2, 0)
K_ATTNRES_NORM2(4, 0)
K_ATTNRES_NORM2(8, 0)
K_ATTNRES_NORM2(1, 1)
K_ATTNRES_NORM2(1, 2)
K_ATTNRES_NORM2(1, 4)
K_ATTNRES_NORM2(1, 8)

// attnres3_mix is attnres2_mix's statements with its barriers gathered (the fused mix and norm's version
// 3). Version 2 summed each vector through two block_sum8 (four barriers a vector) and ran the softmax on
// thread 0 between two more: a row's loads and reductions ran in series, and at two or three rows an SM
// the kernel was bound by that latency (2.0 TB/s at K3's width, run 119). Here each warp's partial sums
// of every vector (the squares and the dot, warp_sum2) go to shared memory with no barrier between the
// vectors, so the next vector's loads overlap this one's sums; after one barrier lane i of every warp
// adds vector i's 8 warp sums in ascending warp order (block_sum8's order) into its score, and each warp
// runs version 2's max and softmax statements, in ascending i, over its lanes' scores by shuffles (warp
// 0 stores p). The mix then takes the vectors in ascending i for every element, as version 2. The same
// bits. Vectors 0 and 1 stay in registers from their sums to the mix, loaded together before any sum;
// the others are read again. n <= 32. red: 16 n floats of shared memory.
//
// Against version 2 at 65,536 x 7,168 (run 121, TestNormTiming): 1.86 -> 1.63 ms at 1 vector, 2.35 ->
// 1.92 at 2, 2.84 -> 2.57 at 3, 3.37 -> 3.28 at 4, but 4.25 -> 4.32 at 5 and 8.06 -> 9.87 at 9: past
// four vectors the ones read again lose what the barriers won (probably the L2: a row of 9 is 258 KB,
// and two blocks on each of 132 SMs hold 68 MB of rows against its 50), so cuda/mixnorm.go runs version
// 2 there. A form keeping no vector in registers (78-80 registers, three blocks an SM: the idea of
// cuda/records/mixnorm_reread_occupancy.diff) was between the two (1.59 at 1, 2.03 at 2, 3.68 at 4,
// 8.80 at 9) and went.
template <int CPT>
__device__ __forceinline__ int attnres3_mix(float4 (&h)[CPT], float* p, const float* const* vs, int n, const float* wg,
                                            int cols, int bf, float* red) {
    const i64 r = blockIdx.x;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int nc = cols / 4;
    const int mine = nc > t ? (nc - t + 255) / 256 : 0;
    const float4* wg4 = (const float4*)wg;
    float4 a[CPT], b[CPT];
#pragma unroll
    for (int j = 0; j < CPT; j++)
        if (j < mine) a[j] = ((const float4*)(vs[0] + r * cols))[t + j * 256];
    if (n > 1) {
#pragma unroll
        for (int j = 0; j < CPT; j++)
            if (j < mine) b[j] = ((const float4*)(vs[1] + r * cols))[t + j * 256];
    }
    for (int i = 0; i < n; i++) {
        float ss, dot;
        if (i == 0) {
            ss = chunk_sq_sum<CPT>(a, mine);
            dot = chunk_dot_sum<CPT>(a, wg4, t, 256, mine);
        } else if (i == 1) {
            ss = chunk_sq_sum<CPT>(b, mine);
            dot = chunk_dot_sum<CPT>(b, wg4, t, 256, mine);
        } else {
            float4 c[CPT];
#pragma unroll
            for (int j = 0; j < CPT; j++)
                if (j < mine) c[j] = ((const float4*)(vs[i] + r * cols))[t + j * 256];
            ss = chunk_sq_sum<CPT>(c, mine);
            dot = chunk_dot_sum<CPT>(c, wg4, t, 256, mine);
        }
        warp_sum2(ss, dot);
        if (lane == 0) {
            red[16 * i + warp] = ss;
            red[16 * i + 8 + warp] = dot;
        }
    }
    __syncthreads();
    float s = 0.0f;  // lane i: vector i's score, as version 2's block_sum8 and statements give it
    if (lane < n) {
        float ss = red[16 * lane], dot = red[16 * lane + 8];
#pragma unroll
        for (int w = 1; w < 8; w++) {
            ss = __fadd_rn(ss, red[16 * lane + w]);
            dot = __fadd_rn(dot, red[16 * lane + 8 + w]);
        }
        const float inv = rsqrt_f(__fadd_rn(__fdiv_rn(ss, (float)cols), 1e-5f));
        s = __fmul_rn(dot, inv);
    }
    float m = 0.0f;
    for (int i = 0; i < n; i++) {
        const float si = __shfl_sync(0xffffffffu, s, i);
        m = i == 0 ? si : fmaxf(m, si);
    }
    const float e = lane < n ? exp_f(__fsub_rn(s, m)) : 0.0f;
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum = __fadd_rn(sum, __shfl_sync(0xffffffffu, e, i));
    const float pl = __fdiv_rn(e, sum);  // lane i: p_i
    if (t < n) p[r * n + t] = pl;
    float4 acc[CPT];
#pragma unroll
    for (int j = 0; j < CPT; j++) acc[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int i = 0; i < n; i++) {
        const float pi = __shfl_sync(0xffffffffu, pl, i);
#pragma unroll
        for (int j = 0; j < CPT; j++) {
            if (j < mine) {
                const float4 v = i == 0 ? a[j] : i == 1 ? b[j] : ((const float4*)(vs[i] + r * cols))[t + j * 256];
                acc[j].x = __fadd_rn(acc[j].x, __fmul_rn(pi, v.x));
                acc[j].y = __fadd_rn(acc[j].y, __fmul_rn(pi, v.y));
                acc[j].z = __fadd_rn(acc[j].z, __fmul_rn(pi, v.z));
                acc[j].w = __fadd_rn(acc[j].w, __fmul_rn(pi, v.w));
            }
        }
    }
#pragma unroll
    for (int j = 0; j < CPT; j++)
        if (j < mine) h[j] = make_float4(rnd(acc[j].x, bf), rnd(acc[j].y, bf), rnd(acc[j].z, bf), rnd(acc[j].w, bf));
    return mine;
}

// attnres_norm3<CPT>: attnres_norm2<CPT, 0> (rows over 1,024 values) with the mix of attnres3_mix:
// the same bits. The norm's sum is block_sum8's without its second barrier (nothing reuses red after it).
// Launch: blockDim 256, gridDim rows, dynamic shared memory 64 n bytes; n <= 32.
template <int CPT>
__device__ __forceinline__ void attnres_norm3(float* out, u16* nb, float* p, const float* const* vs, int n,
                                              const float* wg, int cols, const float* w, float eps, int bf) {
    extern __shared__ float sred[];
    __shared__ float red[8];
    float4 h[CPT];
    const int mine = attnres3_mix<CPT>(h, p, vs, n, wg, cols, bf, sred);
    const int t = threadIdx.x;
    const i64 base = blockIdx.x * (i64)cols;
    const float4* w4 = (const float4*)w;
#pragma unroll
    for (int j = 0; j < CPT; j++)
        if (j < mine) h[j] = rnd4(h[j], bf);  // k_rmsnorm2_w8_c<CPT>: x rounded as read
    float ss = warp_sum(chunk_sq_sum<CPT>(h, mine));
    if ((t & 31) == 0) red[t >> 5] = ss;
    __syncthreads();
    ss = red[0];
#pragma unroll
    for (int w8 = 1; w8 < 8; w8++) ss = __fadd_rn(ss, red[w8]);
    const float inv = rsqrt_f(__fadd_rn(__fdiv_rn(ss, (float)cols), eps));
#pragma unroll
    for (int j = 0; j < CPT; j++)
        if (j < mine) store_norm4(out, nb, base, t + j * 256, norm_out4(h[j], w4[t + j * 256], inv, bf));
}

// K_ATTNRES_NORM3(CPT) defines k_attnres_norm3_c<CPT>, with k_attnres_norm2's arguments; two blocks an SM
// at least (at CPT 8, 128 registers: one more block's worth of rows in flight than ptxas would choose).
#define K_ATTNRES_NORM3(CPT)                                                                                 \
    extern "C" __global__ void __launch_bounds__(256, 2) k_attnres_norm3_c##CPT(                             \
        float* out, u16* nb, float* p, const float* const* vs, int n, const float* wg, int cols,             \
        const float* w, float eps, int bf) {                                                                  \
        attnres_norm3<CPT>(out, nb, p, vs, n, wg, cols, w, eps, bf);                                          \
    }
K_ATTNRES_NORM3(2)
K_ATTNRES_NORM3(4)
K_ATTNRES_NORM3(8)
