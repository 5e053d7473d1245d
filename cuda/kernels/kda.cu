// kda.cu: KDA's short causal convolution with SiLU, and the gated delta rule (K3_SPEC.md 5.2 steps 2-6),
// per sequence of the wave's layout.
//
// Versions:
//   1. k_shortconv: one thread per (row, channel), taps in ascending order, inputs before the row's
//      sequence start skipped (rowStart[t] is the first row of t's sequence). k_kda_prep: one block per
//      (row, head), d threads; thread 0 sums the squares of q and k in ascending order (the CPU backend's
//      order), every thread then writes its channel's normalised q, k and decay factor; beta per (row,
//      head). k_kda: one block per (sequence, head) runs the recurrence token by token; thread j owns
//      column j of the d x d state S (in shared memory, S[i*d + j]: the threads of a warp touch 32
//      consecutive words) and walks i in ascending order, statement for statement the CPU backend's step
//      (products rounded): outputs equal replay/cpu bit for bit. A sequence's blocks read only its own
//      rows, so waves cannot change a bit. The recurrence is latency-bound: one token at a time, d
//      threads a block, sequences x heads blocks.
//   2. k_kda_r32/64/128 (head width d of 32, 64 or 128; others stay on version 1): thread j keeps column j
//      of S in registers instead of shared memory (version 1 read and wrote all d*d words of S from
//      shared memory twice a token: the shared-memory traffic, not the arithmetic, bounded it), and the
//      next row's qn, kn and dec are loaded while this row computes, into the other half of a double
//      buffer, so a token costs one barrier. The statements per column are version 1's, in the same
//      order, so the bits are the same (and equal the CPU backend's).
//   3. k_kda3_r32/64/128: one pass over the state a row instead of two: the second half of row t's step
//      and the first half of row t+1's share the pass (two independent add chains, one 16-byte shared
//      load per i for the four inputs kn_t, qn_t, dec_t+1, kn_t+1); __launch_bounds__(128, 3) keeps
//      k_kda3_r128 at 166 registers without spills (version 2's k_kda_r128: 255 registers and 220 bytes
//      of spill stores a thread, 2 blocks an SM), so 3 blocks (12 warps) share an SM. k_kda_prep3: P
//      (row, head) pairs a block, their q and k rows staged in shared memory, 2P threads summing squares
//      in ascending i at once. Same statements per value, same order: the bits of version 2. H200, 96
//      heads of 128: 16 x 4096 tokens 45.5 ms (version 2: 81.4), 4 x 4096 11.4 (25.3), 1 x 4096 6.0
//      (9.8); cuda/NOTES.md (KDA version 3) has the measurements, the profile and what was tried.
//      Next (not done): the chunked form (chunks of 64, intra-chunk triangular solve on tensor cores),
//      documented as equal to the step loop up to rounding, with its own fixed order (NOTES.md says
//      what it needs); a same-bits recurrence is bounded near 27 ms at 16 x 4096 by instruction issue.
//   4. k_shortconv_v2 (K = 4 taps, channels a multiple of 4; other shapes stay on version 1): version 1
//      divided a 64-bit index per element, loaded rowStart and the taps per element and each input
//      K times; here a thread owns 4 consecutive channels (16-byte loads and stores) of SC_ROWS
//      consecutive rows: rowStart once per row, the 16 taps once, and the SC_ROWS + 3 input rows of its
//      window once each, in registers. The grid is 2D (row groups, channel quads), no division. Per
//      element the statements are version 1's in the same order (taps ascending, taps before the
//      sequence start skipped, products rounded, rnd(silu_f(s), bf)): the same bits. H200, 65,536 x
//      12,288, 16 sequences: 2.77 ms (2.3 TB/s of x read and out written) against version 1's 6.51 ms.
//      Rows a thread, timed: 1: 3.41 ms, 2: 3.08, 4: 2.77, 8: 3.43 (84 registers; fewer warps): SC_ROWS 4.
//   5. k_kda4_r32/64/128 (KDA version 4; item 4 above is the short convolution's): version 3 with fused
//      multiply-adds for the three accumulations of the pass (S += kn u, o += S qn, ks += S kn: one
//      __fmaf_rn each, one rounding instead of two). Version 3 costs 7 FP32 instructions an element and
//      row (an FMUL and FADD for each sum, an FMUL for the decay) and the pass is issue-bound; version 4
//      costs 4 (three FFMA, the decay's FMUL). The same state layout, pass structure, order over i,
//      launch shape and register bound as version 3, so every sum still runs in one fixed order per
//      (sequence, head) and a sequence's bits never depend on the wave; the values differ from version 3
//      (and the CPU backend) at float32 rounding level (the fused sums are the more accurate ones). KDA
//      launches it in BF16 precision only; FP32 precision (the audit mode) keeps version 3, the CPU
//      backend's bits. H200, 96 heads of 128, recurrence alone: 16 x 4096 tokens 31.3 ms (version 3:
//      37.1), 4 x 4096 7.9 (9.3), 1 x 4096 4.9 (5.5): 1.18x, not the 1.75x of the instruction count,
//      because the pass is now bounded by its shared loads (one broadcast LDS.128 an element, 2 shared
//      wavefronts a warp: about 25 ms at 16 x 4096), no longer by FP32 issue. ptxas: 168 registers,
//      no spills with NVRTC 11.8; NVRTC 13 (the H200's) 168 and 8 bytes of spill. cuda/NOTES.md (KDA
//      version 4) has the measurements and what would go further.
//   6. k_kda_prep4 (KDA version 5: prep4, then version 4's recurrence; BF16 precision only): k_kda_prep3
//      spent about 250 instructions an element on dec's double-precision exp and sigmoid (a double
//      exp and a double division each, rounded to float once) and was bound by them. prep4 evaluates
//      them in single precision, sigmoid_ff(x) = __frcp_rn(1 + expf(-x)) and dec = expf(lower * gate),
//      beta = sigmoid_ff(braw) too; the per-pair rate exp(aLog[h]) stays in double (1/d of the work, and
//      the gate's argument stays prep3's bit for bit). qn and kn keep prep3's statements and order (the
//      same bits); the element loops step (pair, channel) by addition instead of a division by d, and
//      the dtBias offset h*d is computed once a pair instead of a 64-bit remainder an element. Accuracy
//      against prep3 on the H200 (TestKDAPrep4, random inputs, lower -5): dec at most 9 float32 ulps
//      (mean 1.0; at most 2.6 ulps per unit of |ln dec|: exp multiplies the gate's few-ulp error by
//      |lower * gate|; at most 3 ulps with lower -1), beta at most 2 ulps; qn, kn identical. Every value
//      depends on its own (row, head) only, so batch invariance is unchanged. H200, 96 heads of 128:
//      prep 16 x 4096 tokens 6.29 ms (prep3: 8.35), 4 x 4096 1.59 (2.10), 1 x 4096 0.42 (0.54); KDA in
//      BF16 precision (prep + recurrence) 37.6 ms at 16 x 4096 (version 4: 39.6). The floor is its
//      19.3 GB of traffic, about 5 ms. 32 registers (prep3: 40-42), no spills.
//   7. k_kda6/7/8_r64/128 (KDA versions 6-8: prep4, then kda_split; width 32 stays on recurrence
//      version 4): version 4's pass with each state column split by rows over R threads and C columns a
//      thread: version 6 R 2, C 1 (2d threads, 64 state values a thread at d = 128), version 7 R 2, C 2
//      (d threads, each 16-byte shared load of a row's inputs serves 2 columns: half version 4's shared
//      loads, its bound), version 8 R 4, C 4 (a quarter). Each thread's partial sums of o and ks (fused
//      multiply-adds, ascending i over its rows) meet at the next pass's barrier (version 4's, no new
//      one) in shared memory, added in ascending slice order: a fixed order per head width, so a
//      sequence's bits never depend on the wave; the values differ from version 4's at float32 rounding
//      level. v is staged in shared memory with the other inputs. ptxas (NVRTC 11.8, sm_90):
//      k_kda6_r128 80 registers (the cap of 3 blocks of 256 threads) with 80 bytes of spill stores;
//      k_kda7_r128 and k_kda8_r128 168, no spills (NVRTC 13 on the H200: k_kda6_r128 80 and 48 bytes of
//      local memory). H200 (cuda/NOTES.md run 22), 96 heads of 128, prep + recurrence against version 5:
//      16 x 4096 tokens 6: 45.6 ms, 7: 32.8, 8: 34.0 (5: 37.6); 4 x 4096 12.8, 8.15, 8.49 (9.46);
//      1 x 4096 7.93, 5.36, 5.23 (5.29). Version 6 is slower (its spills and 256-thread blocks);
//      version 7 is the BF16 default from run 22 (13% faster where the blocks fill the GPU, 1.5% slower
//      at one sequence); version 8's quarter of the shared loads did not beat 7: its four-way partial
//      exchange costs what the loads saved. All three stay within kdaV4Tol of version 3 and
//      bit-identical alone and in a wave (TestKDAVersion6, TestKDAVersion6Wave).
#include "common.cuh"

// k_shortconv: out[t, c] = rnd(silu(sum_{i<K} w[c, i] * x[t-K+1+i, c])) over taps whose row is in t's
// sequence (rows before rowStart[t] are zero, skipped). x and out are rows x ch, w is ch x K.
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
            if (src >= start) s = __fadd_rn(s, __fmul_rn(w[(i64)c * K + i], x[src * ch + c]));
        }
        out[idx] = rnd(silu_f(s), bf);
    }
}

// k_shortconv_v2: k_shortconv for K = 4 and ch % 4 == 0, x, out and w 16-byte aligned. Thread (row group
// blockIdx.x, channel quad q = blockIdx.y * blockDim.x + threadIdx.x) writes out[t, 4q .. 4q+3] for the
// rows t = R * blockIdx.x .. + R - 1 below rows, R = SC_ROWS (each input row is loaded (R + 3) / R times).
// Launch: blockDim 256, gridDim (ceil(rows / R), ceil(ch / 4 / 256)).
#define SC_ROWS 4
template <int R>
__device__ __forceinline__ void shortconv4(float* __restrict__ out, const float* __restrict__ x,
                                           const float* __restrict__ w, const int* __restrict__ rowStart, i64 rows,
                                           int ch, int bf) {
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
        win[m] = src >= lo && src < rows ? *(const float4*)(x + src * ch + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int j = 0; j < R; j++) {
        const i64 t = t0 + j;
        if (t >= rows) break;
        const i64 start = rowStart[t];
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (t - 3 + i >= start) { // version 1's condition, src >= start
                const float4 v = win[j + i];
                s[0] = __fadd_rn(s[0], __fmul_rn(tap[0][i], v.x));
                s[1] = __fadd_rn(s[1], __fmul_rn(tap[1][i], v.y));
                s[2] = __fadd_rn(s[2], __fmul_rn(tap[2][i], v.z));
                s[3] = __fadd_rn(s[3], __fmul_rn(tap[3][i], v.w));
            }
        }
        *(float4*)(out + t * ch + c) =
            make_float4(rnd(silu_f(s[0]), bf), rnd(silu_f(s[1]), bf), rnd(silu_f(s[2]), bf), rnd(silu_f(s[3]), bf));
    }
}

extern "C" __global__ void k_shortconv_v2(float* out, const float* x, const float* w, const int* rowStart, i64 rows,
                                          int ch, int bf) {
    shortconv4<SC_ROWS>(out, x, w, rowStart, rows, ch, bf);
}

// k_kda_prep: for row t = blockIdx.x / heads and head h = blockIdx.x % heads, channel c = h*d + i (i =
// threadIdx.x):
//   qn[t,c] = (q[t,c] * qinv) * scale, qinv = rsqrt(sum_i q[t,c]^2 + 1e-6)   (ascending i)
//   kn[t,c] = k[t,c] * kinv
//   dec[t,c] = exp(lower * sigmoid(exp(aLog[h]) * (graw[t,c] + dtBias[c])))
//   beta[t,h] = sigmoid(braw[t,h])
// Launch: blockDim d, gridDim rows * heads.
extern "C" __global__ void k_kda_prep(float* qn, float* kn, float* dec, float* beta, const float* q, const float* k,
                                      const float* graw, const float* braw, const float* aLog, const float* dtBias,
                                      int heads, int d, float lower, float scale) {
    __shared__ float inv[2];
    i64 t = blockIdx.x / heads;
    int h = (int)(blockIdx.x - t * heads);
    int i = threadIdx.x;
    i64 ch = (i64)heads * d;
    i64 base = t * ch + (i64)h * d;
    if (i == 0) {
        float sq = 0.0f, sk = 0.0f;
        for (int j = 0; j < d; j++) {
            sq = __fadd_rn(sq, __fmul_rn(q[base + j], q[base + j]));
            sk = __fadd_rn(sk, __fmul_rn(k[base + j], k[base + j]));
        }
        inv[0] = rsqrt_f(__fadd_rn(sq, 1e-6f));
        inv[1] = rsqrt_f(__fadd_rn(sk, 1e-6f));
        beta[t * heads + h] = sigmoid_f(braw[t * heads + h]);
    }
    __syncthreads();
    float a = exp_f(aLog[h]);
    qn[base + i] = __fmul_rn(__fmul_rn(q[base + i], inv[0]), scale);
    kn[base + i] = __fmul_rn(k[base + i], inv[1]);
    float gate = sigmoid_f(__fmul_rn(a, __fadd_rn(graw[base + i], dtBias[h * d + i])));
    dec[base + i] = exp_f(__fmul_rn(lower, gate));
}

// k_kda: the delta rule for sequence s = blockIdx.x (rows starts[s] .. starts[s+1]-1) and head
// h = blockIdx.y; thread j, for each row t in order:
//   for i ascending: S[i,j] *= dec[i]; ks += S[i,j] * kn[i]
//   u = beta * (v[t,c_j] - ks)
//   for i ascending: S[i,j] += kn[i] * u; o += S[i,j] * qn[i]
//   out[t, c_j] = rnd(o)
// Shared memory (dynamic): S (d*d floats) then qn, kn, dec of the current row (d floats each).
// Launch: blockDim d, gridDim (sequences, heads), dynamic shared memory (d*d + 3*d) * 4 bytes.
extern "C" __global__ void k_kda(float* out, const float* qn, const float* kn, const float* dec, const float* beta,
                                 const float* v, const int* starts, int heads, int d, int bf) {
    extern __shared__ float smem[];
    float* S = smem;
    float* sq = S + d * d;
    float* sk = sq + d;
    float* sd = sk + d;
    int s = blockIdx.x, h = blockIdx.y, j = threadIdx.x;
    i64 ch = (i64)heads * d;
    for (int i = 0; i < d; i++) S[i * d + j] = 0.0f;
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
}

// kda_reg is version 2 of k_kda for a head width of D: the same per-column statements, the column in
// registers. Launch: blockDim D, gridDim (sequences, heads), no dynamic shared memory.
template <int D>
__device__ __forceinline__ void kda_reg(float* out, const float* qn, const float* kn, const float* dec,
                                        const float* beta, const float* v, const int* starts, int heads, int bf) {
    __shared__ float buf[2][3][D];  // [which half][qn, kn, dec][i]: this row's inputs and the next row's
    int s = blockIdx.x, h = blockIdx.y, j = threadIdx.x;
    i64 ch = (i64)heads * D;
    i64 t0 = starts[s], t1 = starts[s + 1];
    if (t0 >= t1) return;
    float S[D];
#pragma unroll
    for (int i = 0; i < D; i++) S[i] = 0.0f;
    {
        i64 base = t0 * ch + (i64)h * D;
        buf[0][0][j] = qn[base + j];
        buf[0][1][j] = kn[base + j];
        buf[0][2][j] = dec[base + j];
    }
    __syncthreads();
    int cur = 0;
    for (i64 t = t0; t < t1; t++) {
        i64 base = t * ch + (i64)h * D;
        float nq = 0.0f, nk = 0.0f, nd = 0.0f;  // the next row's inputs, in flight during this row's math
        if (t + 1 < t1) {
            nq = qn[base + ch + j];
            nk = kn[base + ch + j];
            nd = dec[base + ch + j];
        }
        float bt = beta[t * heads + h], vj = v[base + j];
        const float* sq = buf[cur][0];
        const float* sk = buf[cur][1];
        const float* sd = buf[cur][2];
        float ks = 0.0f;
#pragma unroll
        for (int i = 0; i < D; i++) {
            float x = __fmul_rn(S[i], sd[i]);
            S[i] = x;
            ks = __fadd_rn(ks, __fmul_rn(x, sk[i]));
        }
        float u = __fmul_rn(bt, __fsub_rn(vj, ks));
        float o = 0.0f;
#pragma unroll
        for (int i = 0; i < D; i++) {
            float x = __fadd_rn(S[i], __fmul_rn(sk[i], u));
            S[i] = x;
            o = __fadd_rn(o, __fmul_rn(x, sq[i]));
        }
        out[base + j] = rnd(o, bf);
        // The other half was last read in the row before, and every thread passed the barrier since.
        buf[cur ^ 1][0][j] = nq;
        buf[cur ^ 1][1][j] = nk;
        buf[cur ^ 1][2][j] = nd;
        __syncthreads();
        cur ^= 1;
    }
}

// KDA_RECURRENCE(name, impl, D, bounds...) defines the extern "C" kernel name that runs impl<D> over one
// (sequence, head) a block of D threads, with __launch_bounds__(bounds).
#define KDA_RECURRENCE(name, impl, D, ...)                                                                  \
    extern "C" __global__ void __launch_bounds__(__VA_ARGS__)                                               \
        name(float* out, const float* qn, const float* kn, const float* dec, const float* beta, const float* v, \
             const int* starts, int heads, int bf) {                                                         \
        impl<D>(out, qn, kn, dec, beta, v, starts, heads, bf);                                               \
    }
KDA_RECURRENCE(k_kda_r32, kda_reg, 32, 32)
KDA_RECURRENCE(k_kda_r64, kda_reg, 64, 64)
KDA_RECURRENCE(k_kda_r128, kda_reg, 128, 128)


// k_kda_prep3 is version 3 of k_kda_prep: the same values, P (row, head) pairs a block (pair p =
// t*heads + h, channels p*d .. p*d+d-1, contiguous): the block stages the pairs' q and k rows in shared
// memory with coalesced loads, then 2P threads (one per pair and q or k) each sum their row's squares in
// ascending i, as version 1's thread 0 did (version 1 left d-1 threads idle while one summed, for every
// (row, head)), then every thread writes channels of the block's pairs with version 1's statements.
// Shared memory (dynamic): 2P rows of d+1 floats (odd stride: the 32 summing lanes hit 32 banks), then
// the 2P inverse norms and the P decay rates exp(aLog[h]).
// Launch: blockDim 128 (2P <= 128), gridDim ceil(pairs / P), (2P(d+1) + 3P) * 4 bytes of shared memory.
extern "C" __global__ void __launch_bounds__(128) k_kda_prep3(float* qn, float* kn, float* dec, float* beta,
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

// sigmoid_ff is 1 / (1 + e^-x) in single precision (k_kda_prep4): expf (CUDA's, at most 2 ulps), one
// rounded add and an IEEE reciprocal (__frcp_rn): within a few ulps of sigmoid_f. For x < -88 expf(-x)
// overflows to infinity and the result is 0 where sigmoid_f gives a denormal below 2^-126.
__device__ __forceinline__ float sigmoid_ff(float x) { return __frcp_rn(__fadd_rn(1.0f, expf(-x))); }

// k_kda_prep4 is k_kda_prep3 with single-precision transcendentals for BF16 precision (KDA version 5,
// kda.cu item 6): per element dec = expf(lower * sigmoid_ff(rate * (graw + dtBias))), per pair beta =
// sigmoid_ff(braw); the decay rate exp(aLog[h]) stays exp_f, in double precision (once per pair, so
// the gate's argument is prep3's bit for bit). qn and kn are prep3's statements in prep3's order (the same
// bits). Besides the math, the element loops step (pair, channel) by adding blockDim instead of dividing
// by d per element, and each pair's dtBias offset h*d is computed once (prep3 takes a 64-bit remainder
// per element). Shared memory: prep3's, then P ints (the pairs' dtBias offsets).
// Launch: blockDim 128 (2P <= 128), gridDim ceil(pairs / P), (2P(d+1) + 4P) * 4 bytes of shared memory.
extern "C" __global__ void __launch_bounds__(128) k_kda_prep4(float* qn, float* kn, float* dec, float* beta,
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

// mac is acc + a*b: the product rounded, then the sum (versions 1-3, the CPU backend's statements), or
// with FUSED one fused multiply-add rounded once (version 4). --fmad=false keeps the compiler from
// contracting the first form; __fmaf_rn is an explicit FFMA either way.
template <bool FUSED>
__device__ __forceinline__ float mac(float acc, float a, float b) {
    return FUSED ? __fmaf_rn(a, b, acc) : __fadd_rn(acc, __fmul_rn(a, b));
}

// kda_merged is version 3 of the recurrence for a head width of D: version 2's statements per column,
// but the second half of row t's step (S += kn_t u_t, o_t) and the first half of row t+1's (S *= dec_t+1,
// ks_t+1) run in one pass over i: both halves walk S[i] in ascending i and S[i] meets the same operands
// in the same order, so every value is version 2's; the pass has two independent add chains (o_t, ks_t+1)
// where version 2 had one, and reads its four inputs of i (kn_t, qn_t, dec_t+1, kn_t+1) with one 16-byte
// shared load (version 2: 3 loads every 4 i, from arrays it read twice a row). Pass t = t0-1 is the first
// row's first half alone (kn = qn = u = 0: S stays +0 before the decay, as in version 2), pass t1-1 the
// last row's second half (the next row's inputs are 0 and its results unused). Thread j keeps column j
// in registers; the inputs of row t+2 are loaded during pass t and staged at the start of pass t+1.
// Launch: blockDim D, gridDim (sequences, heads), no dynamic shared memory.
// With FUSED (version 4) the three sums of the pass are fused multiply-adds (mac): one rounding each
// instead of the product's and the sum's; everything else is version 3's.
template <int D, bool FUSED = false>
__device__ __forceinline__ void kda_merged(float* out, const float* qn, const float* kn, const float* dec,
                                           const float* beta, const float* v, const int* starts, int heads,
                                           int bf) {
    __shared__ float4 st[2][D];  // [which half][i]: (kn_t, qn_t, dec_t+1, kn_t+1) of this pass and the next
    int s = blockIdx.x, h = blockIdx.y, j = threadIdx.x;
    i64 ch = (i64)heads * D;
    i64 t0 = starts[s], t1 = starts[s + 1];
    if (t0 >= t1) return;
    float S[D];
#pragma unroll
    for (int i = 0; i < D; i++) S[i] = 0.0f;
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
        kx = qx = dx = vx = bx = 0.0f;  // the row after t+1, in flight during this pass
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
            float y = mac<FUSED>(S[i], x.x, u);  // row t: S += kn u
            o = mac<FUSED>(o, y, x.y);           //        o += S qn
            y = __fmul_rn(y, x.z);               // row t+1: S *= dec
            S[i] = y;
            ks = mac<FUSED>(ks, y, x.w);  //          ks += S kn
        }
        if (t >= t0) out[t * ch + (i64)h * D + j] = rnd(o, bf);
        cur ^= 1;
    }
}

KDA_RECURRENCE(k_kda3_r32, kda_merged, 32, 32)
KDA_RECURRENCE(k_kda3_r64, kda_merged, 64, 64)
// 3 blocks an SM: at most 168 registers a thread, of which the column takes 128 (ptxas: 165-166, no
// spills; without the bound 188 registers and 2 blocks an SM, 19% slower at 16 x 4096 tokens).
KDA_RECURRENCE(k_kda3_r128, kda_merged, 128, 128, 3)

// kda_fused is version 4 of the recurrence: kda_merged with fused multiply-adds (the KDA_RECURRENCE
// macro instantiates impl<D>). Same launch as version 3.
template <int D>
__device__ __forceinline__ void kda_fused(float* out, const float* qn, const float* kn, const float* dec,
                                          const float* beta, const float* v, const int* starts, int heads, int bf) {
    kda_merged<D, true>(out, qn, kn, dec, beta, v, starts, heads, bf);
}

KDA_RECURRENCE(k_kda4_r32, kda_fused, 32, 32)
KDA_RECURRENCE(k_kda4_r64, kda_fused, 64, 64)
// The same bound as k_kda3_r128: 3 blocks an SM, at most 168 registers a thread.
KDA_RECURRENCE(k_kda4_r128, kda_fused, 128, 128, 3)

// kda_split is the recurrence of KDA versions 6-8 (after k_kda_prep4) for a head width of D: version 4's
// statements with each column split over R threads by rows, and C columns a thread. Thread (slice r = tid
// / P, p = tid % P, P = D / C) keeps rows r*N .. r*N+N-1 (N = D / R) of columns p, p+P, .., p+(C-1)P in
// registers and runs version 4's pass over its N rows (S += kn u, o += S qn, S *= dec, ks += S kn: fused
// multiply-adds in ascending i), giving partial sums of o_t and ks_t+1 for each of its columns. At the
// start of the next pass (after the barrier that version 4 already has) every thread reads the R partials
// of its columns from shared memory and adds them in ascending r, a fixed order set by D alone (((p0 + p1)
// + p2) + p3), so a sequence's bits never depend on the wave; slice 0 writes the output. One 16-byte
// shared load of (kn_t, qn_t, dec_t+1, kn_t+1) per row i serves the C columns of a thread: version 4
// loaded it once an element, and its pass was bounded by those loads. Threads tid < D load and stage
// channel tid of the next rows' kn, qn, dec and v (v staged too, so that a thread holds no v of its own
// columns).
// Launch: blockDim R * D / C (at least D), gridDim (sequences, heads), no dynamic shared memory.
template <int D, int R, int C>
__device__ __forceinline__ void kda_split(float* out, const float* qn, const float* kn, const float* dec,
                                          const float* beta, const float* v, const int* starts, int heads, int bf) {
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
#pragma unroll
    for (int c = 0; c < C; c++)
#pragma unroll
        for (int i = 0; i < N; i++) S[c][i] = 0.0f;
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
        kx = qx = dx = vx = bx = 0.0f;  // the row after t+1, in flight during this pass
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
}

// KDA_SPLIT(name, D, R, C, blocks) defines the extern "C" kernel name that runs kda_split<D, R, C> with
// R * D / C threads a block and __launch_bounds__ for blocks blocks an SM.
#define KDA_SPLIT(name, D, R, C, blocks)                                                                    \
    extern "C" __global__ void __launch_bounds__(R * D / C, blocks)                                         \
        name(float* out, const float* qn, const float* kn, const float* dec, const float* beta, const float* v, \
             const int* starts, int heads, int bf) {                                                         \
        kda_split<D, R, C>(out, qn, kn, dec, beta, v, starts, heads, bf);                                    \
    }
// Version 6: two threads a column (64 state values a thread at D = 128), 2D threads a block.
KDA_SPLIT(k_kda6_r64, 64, 2, 1, 3)
KDA_SPLIT(k_kda6_r128, 128, 2, 1, 3)
// Version 7: two threads a column, two columns a thread (half version 4's shared loads), D threads.
KDA_SPLIT(k_kda7_r64, 64, 2, 2, 3)
KDA_SPLIT(k_kda7_r128, 128, 2, 2, 3)
// Version 8: four threads a column, four columns a thread (a quarter of the shared loads), D threads.
KDA_SPLIT(k_kda8_r64, 64, 4, 4, 3)
KDA_SPLIT(k_kda8_r128, 128, 4, 4, 3)
