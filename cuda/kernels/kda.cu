// kda.cu: KDA's short causal convolution with SiLU, and the gated delta rule (K3_SPEC.md 5.2 steps 2-6),
// per sequence of the wave's layout. The plain loops they compute are the doc comments of
// Backend.ShortConvSiLU and Backend.KDA (cuda/kda.go) and replay/cpu's KDA step, the reference.
//
// Kernels (the kernel each op launches is chosen by precision and shape, never by the wave):
//   Short convolution, both precisions, the CPU backend's bits:
//     k_shortconv4   K = 4 taps, channels a multiple of 4, 16-byte aligned (K3's shape): a thread owns 4
//                    consecutive channels of SC_ROWS consecutive rows (16-byte loads and stores, rowStart
//                    once a row, the 16 taps once, the SC_ROWS + 3 input rows of its window once each).
//                    H200, 65,536 x 12,288, 16 sequences: 2.77 ms (2.3 TB/s of x read and out written).
//                    Rows a thread, timed: 1: 3.41 ms, 2: 3.08, 4: 2.77, 8: 3.43 (84 registers): SC_ROWS 4.
//                    Tried (run 71, cuda/records/shortconv_sliding_window.diff): a sliding window, 16 rows a
//                    thread, each input row loaded once, four loads in flight: 2.87 ms against 2.78.
//                    Version 2 (run 94): SiLU with the sigmoid in single precision where that provably
//                    gives the double-precision statement's bfloat16 bits (common.cuh, tested on the bits).
//                    Version 3 (run 110): the four channels' sigmoids by mul_sigmoid_bf4 at once, their
//                    reciprocals by frcp_fast, one fallback branch for the four: 2.99 -> 2.48 ms at the
//                    shape above; the bench's ShortConvSiLU 43.5 -> 35.1 ms a kda layer (run 112).
//     k_shortconv4n  k_shortconv4 writing the outputs' bfloat16 bits (alone, or beside the float32 values):
//                    ShortConvSiLU's output in BF16 precision with the tensor cores, narrow-only, read by
//                    the chunked KDA kernel's narrow form (cuda/kda.go convNarrow). H100, 65,536 x 12,288:
//                    2.532 ms against k_shortconv4's 2.900 (run 130).
//     k_shortconv    any other shape: one thread an element, grid-stride (6.51 ms at the shape above); the
//                    double-precision statement, TestShortConvBits' oracle for k_shortconv4.
//     Both round x as they load it (BF16 precision): the projections reach them with their rounding
//     deferred (cuda/deferred.go), which saves each projection's rounding pass.
//   KDA in BF16 precision (the default):
//     k_kda_prep_fast   normalised q and k, decay and beta; the decay's exp and sigmoid and beta's sigmoid
//                       in single precision (dec within 9 float32 ulps of the double-precision values,
//                       beta within 2: TestKDAPrepFast). 16 x 4096 tokens, 96 heads of 128: 6.29 ms.
//     k_kda_fast_r64/128  the recurrence (kda_split): fused multiply-adds, each state column over two
//                       threads that hold two columns each, partial sums added in a fixed order. 16 x 4096
//                       tokens, 96 heads of 128, prep + recurrence 32.8 ms, 4 x 4096 8.15, 1 x 4096 5.36
//                       (cuda/records/JOURNAL.md, run 22). ptxas: 168 registers, no spills.
//     other head widths run the exact recurrence below after k_kda_prep_fast.
//   KDA in FP32 precision (the audit mode), and the exact fallback: the CPU backend's statements in its
//   order, products rounded before the add, transcendentals in double rounded once, so the outputs equal
//   replay/cpu bit for bit:
//     k_kda_prep_exact  as k_kda_prep_fast with exp and sigmoid in double; 8.35 ms at 16 x 4096.
//     k_kda_exact_r32/64/128  the recurrence with a column in registers and one pass over the state a row
//                       (kda_merged); __launch_bounds__(128, 3) keeps k_kda_exact_r128 at 166 registers
//                       without spills. 16 x 4096 tokens, 96 heads of 128: 45.5 ms with its prep.
//     k_kda_exact       any other head width: the state in shared memory, (d*d + 3d) * 4 bytes.
//   Every kernel reads only its own sequence's rows and runs each sum in one fixed order (ascending i)
//   per sequence and head, so a sequence's bits never depend on the wave in either precision. The
//   recurrence is latency-bound: one token at a time, sequences x heads blocks.
//
// Removed versions (their sources are in git history before the cuda rooms split; their measurements,
// profiles and what was tried are in cuda/records/JOURNAL.md, "Removed kernel versions"): the
// recurrence in shared memory for K3's widths (old version 1), its register form with two passes a row
// (2), the merged pass with fused multiply-adds and no split (4; old KDAVersion 4 and 5), the split over
// two threads a column with one column a thread (6) and over four threads with four columns (8), and the
// one-block-per-pair prep (1). The chunked form on the tensor cores is kda_chunk.cu (BF16 precision with
// the tensor cores at widths 64 and 128); these kernels run everywhere else.
#include "common.cuh"

// k_shortconv (any shape): out[t, c] = rnd(silu(sum_{i<K} w[c, i] * rnd(x[t-K+1+i, c]))) over taps whose row is in
// t's sequence (rows before rowStart[t] are zero, skipped). x and out are rows x ch, w is ch x K. x is
// rounded as it is loaded: a projection's output with its rounding deferred (cuda/deferred.go).
// Launch: blockDim 256, gridDim ceil(rows * ch / 256) (grid-stride).
extern "C" __global__ void k_shortconv(float* out, const float* x, const float* w, const int* rowStart, i64 rows,
                                       int ch, int K, int bf) {
    i64 n = rows * ch;
    for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < n; idx += (i64)gridDim.x * blockDim.x) {
        i64 t = idx / ch;
        int c = (int)(idx - t * ch);
        i64 start = rowStart[t];
        float s = 0.0f;
        for (int i = 0; i < K; i++) {
            i64 src = t - K + 1 + i;
            if (src >= start) s = __fadd_rn(s, __fmul_rn(w[(i64)c * K + i], rnd(x[src * ch + c], bf)));
        }
        out[idx] = rnd(silu_f(s), bf);
    }
}

// k_shortconv4: k_shortconv for K = 4 and ch % 4 == 0, x, out and w 16-byte aligned. Thread (row group
// blockIdx.x, channel quad q = blockIdx.y * blockDim.x + threadIdx.x) writes out[t, 4q .. 4q+3] for the
// rows t = R * blockIdx.x .. + R - 1 below rows, R = SC_ROWS (each input row is loaded (R + 3) / R times).
// Launch: blockDim 256, gridDim (ceil(rows / R), ceil(ch / 4 / 256)).
#define SC_ROWS 4
// ld_x4 loads inputs c .. c+3 of row src as float32, rounded in BF16 precision (bf): float32 values,
// rounded as loaded (a projection's deferred rounding, cuda/deferred.go), or bfloat16 bits (a projection's
// narrow-only output, cuda/matmul_narrow.go), exact.
__device__ __forceinline__ float4 ld_x4(const float* x, i64 i, int bf) { return rnd4(*(const float4*)(x + i), bf); }
__device__ __forceinline__ float4 ld_x4(const u16* x, i64 i, int) { return bf16x4_value(*(const uint2*)(x + i)); }
template <int R, typename TX>
__device__ __forceinline__ void shortconv4(float* __restrict__ out, const TX* __restrict__ x,
                                           const float* __restrict__ w, const int* __restrict__ rowStart, i64 rows,
                                           int ch, int bf, uint2* __restrict__ nb) {
    const int c = 4 * (blockIdx.y * blockDim.x + threadIdx.x);
    if (c >= ch) return;
    const i64 t0 = (i64)blockIdx.x * R;
    float tap[4][4]; // tap[k][i] = w[c + k, i]
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float4 v = *(const float4*)(w + (i64)(c + k) * 4);
        tap[k][0] = v.x, tap[k][1] = v.y, tap[k][2] = v.z, tap[k][3] = v.w;
    }
    const i64 lo = rowStart[t0]; // the earliest row any output of this thread reads (starts ascend)
    float4 win[R + 3];           // win[m] = x[t0 - 3 + m, c .. c+3]
#pragma unroll
    for (int m = 0; m < R + 3; m++) {
        i64 src = t0 - 3 + m;
        win[m] = src >= lo && src < rows ? ld_x4(x, src * ch + c, bf) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int j = 0; j < R; j++) {
        const i64 t = t0 + j;
        if (t >= rows) break;
        const i64 start = rowStart[t];
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (t - 3 + i >= start) { // k_shortconv's condition, src >= start
                const float4 v = win[j + i];
                s[0] = __fadd_rn(s[0], __fmul_rn(tap[0][i], v.x));
                s[1] = __fadd_rn(s[1], __fmul_rn(tap[1][i], v.y));
                s[2] = __fadd_rn(s[2], __fmul_rn(tap[2][i], v.z));
                s[3] = __fadd_rn(s[3], __fmul_rn(tap[3][i], v.w));
            }
        }
        const float4 sv = make_float4(s[0], s[1], s[2], s[3]);
        const float4 y = mul_sigmoid_bf4(sv, sv, bf);
        if (out != nullptr) *(float4*)(out + t * ch + c) = y;
        if (nb != nullptr) // bfloat16 values in BF16 precision: their top halves are exact
            nb[(t * ch + c) / 4] = bf16x4_bits(y);
    }
}

extern "C" __global__ void k_shortconv4(float* out, const float* x, const float* w, const int* rowStart, i64 rows,
                                          int ch, int bf) {
    shortconv4<SC_ROWS, float>(out, x, w, rowStart, rows, ch, bf, nullptr);
}

// k_shortconv4n: k_shortconv4 that also writes the outputs' bfloat16 bits to nb (BF16 precision only), the
// copy the chunked KDA kernel reads its q, k and v from (cuda/kda.go, narrow inputs); a null out writes the
// copy alone (cuda/narrow.go, narrow-only outputs).
extern "C" __global__ void k_shortconv4n(float* out, const float* x, const float* w, const int* rowStart, i64 rows,
                                           int ch, int bf, uint2* nb) {
    shortconv4<SC_ROWS, float>(out, x, w, rowStart, rows, ch, bf, nb);
}

// k_shortconv4b: k_shortconv4n over bfloat16 inputs x (their bits, 8-byte aligned rows of ch values): a
// projection's narrow-only output (cuda/matmul_narrow.go), half the bytes of its float32 values read.
extern "C" __global__ void k_shortconv4b(float* out, const u16* x, const float* w, const int* rowStart, i64 rows,
                                           int ch, int bf, uint2* nb) {
    shortconv4<SC_ROWS, u16>(out, x, w, rowStart, rows, ch, bf, nb);
}

// k_kda_exact (any head width; the CPU backend's statements): the delta rule for sequence s = blockIdx.x (rows starts[s] .. starts[s+1]-1) and head
// h = blockIdx.y; thread j, for each row t in order:
//   for i ascending: S[i,j] *= dec[i]; ks += S[i,j] * kn[i]
//   u = beta * (v[t,c_j] - ks)
//   for i ascending: S[i,j] += kn[i] * u; o += S[i,j] * qn[i]
//   out[t, c_j] = rnd(o)
// Shared memory (dynamic): S (d*d floats) then qn, kn, dec of the current row (d floats each).
// Launch: blockDim d, gridDim (sequences, heads), dynamic shared memory (d*d + 3*d) * 4 bytes.
extern "C" __global__ void k_kda_exact(float* out, const float* qn, const float* kn, const float* dec, const float* beta,
                                 const float* v, const int* starts, int heads, int d, int bf, const float* init,
                                 float* fin) {
    extern __shared__ float smem[];
    float* S = smem;
    float* sq = S + d * d;
    float* sk = sq + d;
    float* sd = sk + d;
    int s = blockIdx.x, h = blockIdx.y, j = threadIdx.x;
    i64 ch = (i64)heads * d;
    const float* S0 = init != nullptr && s == 0 ? init + (i64)h * d * d : nullptr;  // a carried state
    for (int i = 0; i < d; i++) S[i * d + j] = S0 != nullptr ? S0[i * d + j] : 0.0f;
    for (i64 t = starts[s]; t < starts[s + 1]; t++) {
        i64 base = t * ch + (i64)h * d;
        sq[j] = qn[base + j];
        sk[j] = kn[base + j];
        sd[j] = dec[base + j];
        __syncthreads();
        float ks = 0.0f;
        for (int i = 0; i < d; i++) {
            float x = __fmul_rn(S[i * d + j], sd[i]);
            S[i * d + j] = x;
            ks = __fadd_rn(ks, __fmul_rn(x, sk[i]));
        }
        float u = __fmul_rn(beta[t * heads + h], __fsub_rn(v[base + j], ks));
        float o = 0.0f;
        for (int i = 0; i < d; i++) {
            float x = __fadd_rn(S[i * d + j], __fmul_rn(sk[i], u));
            S[i * d + j] = x;
            o = __fadd_rn(o, __fmul_rn(x, sq[i]));
        }
        out[base + j] = rnd(o, bf);
        __syncthreads();
    }
    if (fin != nullptr && s == (int)gridDim.x - 1)  // the last sequence goes on in the next slice
        for (int i = 0; i < d; i++) fin[(i64)h * d * d + i * d + j] = S[i * d + j];
}

// KDA_RECURRENCE(name, impl, D, bounds...) defines the extern "C" kernel name that runs impl<D> over one
// (sequence, head) a block of D threads, with __launch_bounds__(bounds).
#define KDA_RECURRENCE(name, impl, D, ...)                                                                  \
    extern "C" __global__ void __launch_bounds__(__VA_ARGS__)                                               \
        name(float* out, const float* qn, const float* kn, const float* dec, const float* beta, const float* v, \
             const int* starts, int heads, int bf, const float* init, float* fin) {                          \
        impl<D>(out, qn, kn, dec, beta, v, starts, heads, bf, init, fin);                                    \
    }


// k_kda_prep_exact: the normalised q and k, the decay and beta, with the CPU backend's statements:
//   qn[t,c] = (q[t,c] * qinv) * scale, qinv = rsqrt(sum_i q[t,c]^2 + 1e-6)   (ascending i)
//   kn[t,c] = k[t,c] * kinv
//   dec[t,c] = exp(lower * sigmoid(exp(aLog[h]) * (graw[t,c] + dtBias[c])))   (double, rounded once)
//   beta[t,h] = sigmoid(braw[t,h])
// P (row, head) pairs a block (pair p = t*heads + h, channels p*d .. p*d+d-1, contiguous): the block
// stages the pairs' q and k rows in shared memory with coalesced loads, then 2P threads (one per pair and
// q or k) each sum their row's squares in ascending i, then every thread writes channels of the block's
// pairs.
// Shared memory (dynamic): 2P rows of d+1 floats (odd stride: the 32 summing lanes hit 32 banks), then
// the 2P inverse norms and the P decay rates exp(aLog[h]).
// Launch: blockDim 128 (2P <= 128), gridDim ceil(pairs / P), (2P(d+1) + 3P) * 4 bytes of shared memory.
extern "C" __global__ void __launch_bounds__(128) k_kda_prep_exact(float* qn, float* kn, float* dec, float* beta,
                                                              const float* q, const float* k, const float* graw,
                                                              const float* braw, const float* aLog,
                                                              const float* dtBias, i64 pairs, int heads, int d,
                                                              int P, float lower, float scale) {
    extern __shared__ float sm[];
    int ld = d + 1;
    float* inv = sm + 2 * P * ld;
    float* rate = inv + 2 * P;
    i64 p0 = (i64)blockIdx.x * P;
    int np = (int)min((i64)P, pairs - p0);
    i64 e0 = p0 * d;
    int ne = np * d;
    for (int e = threadIdx.x; e < ne; e += blockDim.x) {
        int r = e / d, i = e - r * d;
        sm[2 * r * ld + i] = q[e0 + e];
        sm[(2 * r + 1) * ld + i] = k[e0 + e];
    }
    __syncthreads();
    int c = threadIdx.x;  // row c of the staged rows: q (even) or k (odd) of pair c / 2
    if (c < 2 * np) {
        const float* x = sm + c * ld;
        float s = 0.0f;
#pragma unroll 8
        for (int i = 0; i < d; i++) s = __fadd_rn(s, __fmul_rn(x[i], x[i]));
        inv[c] = rsqrt_f(__fadd_rn(s, 1e-6f));
        if ((c & 1) == 0) {
            i64 p = p0 + c / 2;
            rate[c / 2] = exp_f(aLog[(int)(p % heads)]);
            beta[p] = sigmoid_f(braw[p]);
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < ne; e += blockDim.x) {
        int r = e / d, i = e - r * d;
        int h = (int)((p0 + r) % heads);
        qn[e0 + e] = __fmul_rn(__fmul_rn(sm[2 * r * ld + i], inv[2 * r]), scale);
        kn[e0 + e] = __fmul_rn(sm[(2 * r + 1) * ld + i], inv[2 * r + 1]);
        float gate = sigmoid_f(__fmul_rn(rate[r], __fadd_rn(graw[e0 + e], dtBias[h * d + i])));
        dec[e0 + e] = exp_f(__fmul_rn(lower, gate));
    }
}

// k_kda_prep_fast is k_kda_prep_exact with single-precision transcendentals, for BF16 precision: per element dec = expf(lower * sigmoid_ff(rate * (graw + dtBias))), per pair beta =
// sigmoid_ff(braw); the decay rate exp(aLog[h]) stays exp_f, in double precision (once per pair, so
// the gate's argument is prep_exact's bit for bit). qn and kn are prep_exact's statements in prep_exact's order (the same
// bits). Besides the math, the element loops step (pair, channel) by adding blockDim instead of dividing
// by d per element, and each pair's dtBias offset h*d is computed once (prep_exact takes a 64-bit remainder
// per element). Shared memory: prep_exact's, then P ints (the pairs' dtBias offsets).
// Launch: blockDim 128 (2P <= 128), gridDim ceil(pairs / P), (2P(d+1) + 4P) * 4 bytes of shared memory.
extern "C" __global__ void __launch_bounds__(128) k_kda_prep_fast(float* qn, float* kn, float* dec, float* beta,
                                                              const float* q, const float* k, const float* graw,
                                                              const float* braw, const float* aLog,
                                                              const float* dtBias, i64 pairs, int heads, int d,
                                                              int P, float lower, float scale) {
    extern __shared__ float sm[];
    int ld = d + 1;
    float* inv = sm + 2 * P * ld;
    float* rate = inv + 2 * P;
    int* hoff = (int*)(rate + P);
    i64 p0 = (i64)blockIdx.x * P;
    int np = (int)min((i64)P, pairs - p0);
    i64 e0 = p0 * d;
    int ne = np * d;
    const int r0 = threadIdx.x / d, i0 = threadIdx.x - r0 * d; // the thread's first (pair, channel)
    const int sr = blockDim.x / d, si = blockDim.x - sr * d;   // the step of e += blockDim.x in (pair, channel)
    for (int e = threadIdx.x, r = r0, i = i0; e < ne; e += blockDim.x) {
        sm[2 * r * ld + i] = q[e0 + e];
        sm[(2 * r + 1) * ld + i] = k[e0 + e];
        r += sr, i += si;
        if (i >= d) r++, i -= d;
    }
    __syncthreads();
    int c = threadIdx.x;  // row c of the staged rows: q (even) or k (odd) of pair c / 2
    if (c < 2 * np) {
        const float* x = sm + c * ld;
        float s = 0.0f;
#pragma unroll 8
        for (int i = 0; i < d; i++) s = __fadd_rn(s, __fmul_rn(x[i], x[i]));
        inv[c] = rsqrt_f(__fadd_rn(s, 1e-6f));
        if ((c & 1) == 0) {
            i64 p = p0 + c / 2;
            int h = (int)(p % heads);
            rate[c / 2] = exp_f(aLog[h]);
            hoff[c / 2] = h * d;
            beta[p] = sigmoid_ff(braw[p]);
        }
    }
    __syncthreads();
    for (int e = threadIdx.x, r = r0, i = i0; e < ne; e += blockDim.x) {
        qn[e0 + e] = __fmul_rn(__fmul_rn(sm[2 * r * ld + i], inv[2 * r]), scale);
        kn[e0 + e] = __fmul_rn(sm[(2 * r + 1) * ld + i], inv[2 * r + 1]);
        float gate = sigmoid_ff(__fmul_rn(rate[r], __fadd_rn(graw[e0 + e], dtBias[hoff[r] + i])));
        dec[e0 + e] = expf(__fmul_rn(lower, gate));
        r += sr, i += si;
        if (i >= d) r++, i -= d;
    }
}

// mac is acc + a*b: the product rounded, then the sum (the CPU backend's statements). --fmad=false keeps
// the compiler from contracting it.
__device__ __forceinline__ float mac(float acc, float a, float b) { return __fadd_rn(acc, __fmul_rn(a, b)); }

// kda_merged is the exact recurrence for a head width of D (k_kda_exact_rD): k_kda_exact's statements
// per column, with column j of S in thread j's registers, and the second half of row t's step
// (S += kn_t u_t, o_t) and the first half of row t+1's (S *= dec_t+1, ks_t+1) in one pass over i: both
// halves walk S[i] in ascending i and S[i] meets the same operands in the same order, so every value is
// k_kda_exact's (and the CPU backend's); the pass has two independent add chains (o_t, ks_t+1) and reads
// its four inputs of i (kn_t, qn_t, dec_t+1, kn_t+1) with one 16-byte shared load. Pass t = t0-1 is the
// first row's first half alone (kn = qn = u = 0: S stays +0 before the decay), pass t1-1 the last row's
// second half (the next row's inputs are 0 and its results unused). The inputs of row t+2 are loaded
// during pass t and staged at the start of pass t+1.
// Launch: blockDim D, gridDim (sequences, heads), no dynamic shared memory.
template <int D>
__device__ __forceinline__ void kda_merged(float* out, const float* qn, const float* kn, const float* dec,
                                           const float* beta, const float* v, const int* starts, int heads,
                                           int bf, const float* init, float* fin) {
    __shared__ float4 st[2][D];  // [which half][i]: (kn_t, qn_t, dec_t+1, kn_t+1) of this pass and the next
    int s = blockIdx.x, h = blockIdx.y, j = threadIdx.x;
    i64 ch = (i64)heads * D;
    i64 t0 = starts[s], t1 = starts[s + 1];
    if (t0 >= t1) return;
    float S[D];
    const float* S0 = init != nullptr && s == 0 ? init + (i64)h * D * D : nullptr;  // a carried state
#pragma unroll
    for (int i = 0; i < D; i++) S[i] = S0 != nullptr ? S0[i * D + j] : 0.0f;
    const float* qp = qn + (i64)h * D + j;  // column j of head h, row 0
    const float* kp = kn + (i64)h * D + j;
    const float* dp = dec + (i64)h * D + j;
    const float* vp = v + (i64)h * D + j;
    // this pass's row t (k, q, v, beta) and the next row t+1 (k, q, dec, v, beta); t = t0-1 is empty
    float kc = 0.0f, qc = 0.0f, vc = 0.0f, bc = 0.0f, ks = 0.0f;
    float kx = kp[t0 * ch], qx = qp[t0 * ch], dx = dp[t0 * ch], vx = vp[t0 * ch], bx = beta[t0 * heads + h];
    int cur = 0;
    for (i64 t = t0 - 1; t < t1; t++) {
        st[cur][j] = make_float4(kc, qc, dx, kx);
        __syncthreads();  // the other half was last read in the pass before, which every thread has ended
        float u = __fmul_rn(bc, __fsub_rn(vc, ks));
        kc = kx, qc = qx, vc = vx, bc = bx;
        // the row after t+1, in flight during this pass; past the end its decay is 1, so that the last
        // pass leaves S as the last row made it (the state a carry hands on; unused otherwise)
        kx = qx = vx = bx = 0.0f;
        dx = 1.0f;
        if (t + 2 < t1) {
            i64 r = (t + 2) * ch;
            kx = kp[r], qx = qp[r], dx = dp[r], vx = vp[r], bx = beta[(t + 2) * heads + h];
        }
        const float4* w = st[cur];
        float o = 0.0f;
        ks = 0.0f;
#pragma unroll
        for (int i = 0; i < D; i++) {
            float4 x = w[i];
            float y = mac(S[i], x.x, u);  // row t: S += kn u
            o = mac(o, y, x.y);           //        o += S qn
            y = __fmul_rn(y, x.z);               // row t+1: S *= dec
            S[i] = y;
            ks = mac(ks, y, x.w);  //          ks += S kn
        }
        if (t >= t0) out[t * ch + (i64)h * D + j] = rnd(o, bf);
        cur ^= 1;
    }
    if (fin != nullptr && s == (int)gridDim.x - 1) {  // the last sequence goes on in the next slice
#pragma unroll
        for (int i = 0; i < D; i++) fin[(i64)h * D * D + i * D + j] = S[i];
    }
}

KDA_RECURRENCE(k_kda_exact_r32, kda_merged, 32, 32)
KDA_RECURRENCE(k_kda_exact_r64, kda_merged, 64, 64)
// 3 blocks an SM: at most 168 registers a thread, of which the column takes 128 (ptxas: 165-166, no
// spills; without the bound 188 registers and 2 blocks an SM, 19% slower at 16 x 4096 tokens).
KDA_RECURRENCE(k_kda_exact_r128, kda_merged, 128, 128, 3)

// kda_split is the BF16 recurrence (k_kda_fast_rD, after k_kda_prep_fast) for a head width of D:
// kda_merged's pass with fused multiply-adds (S += kn u, o += S qn, ks += S kn: one rounding each instead
// of the product's and the sum's), each column split over R threads by rows, and C columns a thread.
// Thread (slice r = tid / P, p = tid % P, P = D / C) keeps rows r*N .. r*N+N-1 (N = D / R) of columns p,
// p+P, .., p+(C-1)P in registers and runs the pass over its N rows in ascending i, giving partial sums of
// o_t and ks_t+1 for each of its columns. At the start of the next pass (after the pass's one barrier)
// every thread reads the R partials of its columns from shared memory and adds them in ascending r, a
// fixed order set by D alone, so a sequence's bits never depend on the wave; slice 0 writes the output.
// One 16-byte shared load of (kn_t, qn_t, dec_t+1, kn_t+1) per row i serves the C columns of a thread
// (the unsplit pass loaded it once an element, and was bounded by those loads). Threads tid < D load and
// stage channel tid of the next rows' kn, qn, dec and v (v staged too, so that a thread holds no v of
// its own columns).
// Launch: blockDim R * D / C (at least D), gridDim (sequences, heads), no dynamic shared memory.
template <int D, int R, int C>
__device__ __forceinline__ void kda_split(float* out, const float* qn, const float* kn, const float* dec,
                                          const float* beta, const float* v, const int* starts, int heads, int bf,
                                          const float* init, float* fin) {
    constexpr int P = D / C;  // threads of a row slice (one column each, C times)
    constexpr int N = D / R;  // rows a thread
    static_assert(R * P >= D, "one staging thread per channel");
    __shared__ float4 st[2][N * R];  // [which half][i]: (kn_t, qn_t, dec_t+1, kn_t+1) of this pass and the next
    __shared__ float sv[2][D];       // [which half][j]: v_t
    __shared__ float2 part[2][R][D];  // [which half][slice][column]: partial (o_t-1, ks_t) of the pass before
    const int s = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    const int r = tid / P, p = tid - r * P;
    const bool stager = tid < D;
    const i64 ch = (i64)heads * D;
    const i64 t0 = starts[s], t1 = starts[s + 1];
    if (t0 >= t1) return;
    float S[C][N];
    const float* S0 = init != nullptr && s == 0 ? init + (i64)h * D * D : nullptr;  // a carried state
#pragma unroll
    for (int c = 0; c < C; c++)
#pragma unroll
        for (int i = 0; i < N; i++) S[c][i] = S0 != nullptr ? S0[(r * N + i) * D + p + c * P] : 0.0f;
    const i64 hb = (i64)h * D + (stager ? tid : 0);  // channel tid of head h, row 0
    // this pass's row t (k, q, v, beta) and the next row t+1 (k, q, dec, v, beta); t = t0-1 is empty
    float kc = 0.0f, qc = 0.0f, vc = 0.0f, bc = 0.0f;
    float kx = 0.0f, qx = 0.0f, dx = 0.0f, vx = 0.0f, bx = beta[t0 * heads + h];
    if (stager) kx = kn[hb + t0 * ch], qx = qn[hb + t0 * ch], dx = dec[hb + t0 * ch], vx = v[hb + t0 * ch];
    float o[C], ks[C];  // this thread's partial sums of the pass before
#pragma unroll
    for (int c = 0; c < C; c++) o[c] = ks[c] = 0.0f;
    int cur = 0;
    for (i64 t = t0 - 1; t <= t1; t++) {
        if (stager) st[cur][tid] = make_float4(kc, qc, dx, kx), sv[cur][tid] = vc;
#pragma unroll
        for (int c = 0; c < C; c++) part[cur][r][p + c * P] = make_float2(o[c], ks[c]);
        __syncthreads();  // the other halves were last read in the pass before, which every thread has ended
        float u[C];
#pragma unroll
        for (int c = 0; c < C; c++) {
            const int col = p + c * P;
            float2 a = part[cur][0][col];
#pragma unroll
            for (int q = 1; q < R; q++) {
                float2 b = part[cur][q][col];
                a.x = __fadd_rn(a.x, b.x);
                a.y = __fadd_rn(a.y, b.y);
            }
            if (r == 0 && t > t0) out[(t - 1) * ch + (i64)h * D + col] = rnd(a.x, bf);
            u[c] = __fmul_rn(bc, __fsub_rn(sv[cur][col], a.y));
        }
        if (t == t1) break;  // the last row's output is written; no pass left
        kc = kx, qc = qx, vc = vx, bc = bx;
        // the row after t+1, in flight during this pass; past the end its decay is 1 (as kda_merged's)
        kx = qx = vx = bx = 0.0f;
        dx = 1.0f;
        if (t + 2 < t1) {
            bx = beta[(t + 2) * heads + h];
            if (stager) {
                i64 e = hb + (t + 2) * ch;
                kx = kn[e], qx = qn[e], dx = dec[e], vx = v[e];
            }
        }
        const float4* w = st[cur] + r * N;
#pragma unroll
        for (int c = 0; c < C; c++) o[c] = ks[c] = 0.0f;
#pragma unroll
        for (int i = 0; i < N; i++) {
            float4 x = w[i];
#pragma unroll
            for (int c = 0; c < C; c++) {
                float y = __fmaf_rn(x.x, u[c], S[c][i]);  // row t: S += kn u
                o[c] = __fmaf_rn(y, x.y, o[c]);           //        o += S qn
                y = __fmul_rn(y, x.z);                    // row t+1: S *= dec
                S[c][i] = y;
                ks[c] = __fmaf_rn(y, x.w, ks[c]);  //          ks += S kn
            }
        }
        cur ^= 1;
    }
    if (fin != nullptr && s == (int)gridDim.x - 1) {  // the last sequence goes on in the next slice
#pragma unroll
        for (int c = 0; c < C; c++)
#pragma unroll
            for (int i = 0; i < N; i++) fin[(i64)h * D * D + (r * N + i) * D + p + c * P] = S[c][i];
    }
}

// KDA_SPLIT(name, D, R, C, blocks) defines the extern "C" kernel name that runs kda_split<D, R, C> with
// R * D / C threads a block and __launch_bounds__ for blocks blocks an SM.
#define KDA_SPLIT(name, D, R, C, blocks)                                                                    \
    extern "C" __global__ void __launch_bounds__(R * D / C, blocks)                                         \
        name(float* out, const float* qn, const float* kn, const float* dec, const float* beta, const float* v, \
             const int* starts, int heads, int bf, const float* init, float* fin) {                          \
        kda_split<D, R, C>(out, qn, kn, dec, beta, v, starts, heads, bf, init, fin);                         \
    }
// Two threads a column, two columns a thread (half the unsplit pass's shared loads), D threads; 3 blocks
// an SM (168 registers a thread, no spills: kda.cu's header).
KDA_SPLIT(k_kda_fast_r64, 64, 2, 2, 3)
KDA_SPLIT(k_kda_fast_r128, 128, 2, 2, 3)
