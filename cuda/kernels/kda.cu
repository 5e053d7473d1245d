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
//      Next (not done): the chunked form (chunks of 64, intra-chunk triangular solve on tensor cores),
//      documented as equal to the step loop up to rounding, with its own fixed order.
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
