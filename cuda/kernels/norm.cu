// norm.cu: RMSNorm (and its gated form) and the AttnRes mix: row reductions followed by a row update.
//
// Versions:
//   1. one warp per normalised group (RMSNorm) or per row (AttnResMix), 8 warps a block. Sums of a vector
//      run lane-strided (lane l adds elements l, l+32, ... in ascending order, products rounded to float32)
//      and then through warp_sum's fixed butterfly: the order depends on the vector's length only, never on
//      the grid or the number of rows, so every row's bits are the same alone or in any wave. Against
//      replay/cpu (one ascending sum) the norm factors differ at float32 rounding level.
#include "common.cuh"

// k_rmsnorm: for each group q of g consecutive values of x (groups = rows * cols / g), with w 1 x g:
//   inv = rsqrt(sum_sq / g + eps); out[d] = rnd(rnd(v[d] * inv) * w[d]);
//   and when gate is not null: out[d] = rnd(out[d] * sigmoid(gate[d])).
// Launch: blockDim 256 (8 warps), gridDim ceil(groups / 8).
extern "C" __global__ void k_rmsnorm(float* out, const float* x, const float* w, const float* gate, i64 groups, int g,
                                     float eps, int bf) {
    int lane = threadIdx.x & 31;
    i64 q = blockIdx.x * (i64)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (q >= groups) return;
    const float* v = x + q * g;
    float ss = lane_sum_sq(v, g, lane);
    float inv = rsqrt_f(__fadd_rn(__fdiv_rn(ss, (float)g), eps));
    float* o = out + q * g;
    for (int d = lane; d < g; d += 32) {
        float y = rnd(__fmul_rn(rnd(__fmul_rn(v[d], inv), bf), w[d]), bf);
        if (gate != 0) y = rnd(__fmul_rn(y, sigmoid_f(gate[q * g + d])), bf);
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
