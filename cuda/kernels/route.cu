// route.cu: the router's selection (K3_SPEC.md 5.5 steps 1-3) from its float32 logits x w^T, which
// k_matmul_* computes unrounded beforehand.
//
// Versions:
//   1. one thread per row: s = sigmoid(logit) in place, then the CPU backend's insertion top-k over the
//      biased scores s + bias in ascending expert order (a value enters only when strictly larger, so
//      equal scores keep the lower id first), writing the chosen ids straight into the output row, then
//      the weights s / (sum + 1e-20) * scale with the sum in selection order. Statement for statement the
//      CPU backend's routeRows: ids and weights equal it bit for bit given equal logits (the CUDA-core
//      matmul's; cuBLASLt's in BF16 precision differ at rounding level: Route in moe.go). Each row alone: batch invariant. O(experts * k) per thread; the rows of a wave give
//      the parallelism. At K3's size (896 experts, k 16) on the H200: 0.75 ms for one of Route's chunks of
//      16,384 rows (128 blocks: one a streaming multiprocessor), 2.15 ms for 65,536 rows: each thread walks
//      its own row (a warp's loads hit 32 rows 3.5 KB apart) and the insertions are serial.
//   2. k_route_topk_v2, one warp per row. The lanes read the row coalesced (lane l has experts l, l+32,
//      ...), compute s and v = s + bias with version 1's statements and keep both in shared memory. The
//      selection is k rounds of a warp argmax over 64-bit keys (v's order-preserving bits, then the
//      complemented id: larger key = larger v, equal v to the lower id; -0 counts as +0 since v1's
//      comparisons treat them as equal): without NaN, version 1's insertion top-k (strict >, ascending
//      scan) yields exactly the k largest under that total order, in that order, so the two agree. Each
//      lane holds the best key among its own experts; after a round only the winner's owner lane needs a
//      new one, the best of its experts below the key just taken (all of its larger ones are taken
//      already), which the whole warp finds in one more argmax over that lane's experts. The sum of the
//      chosen s runs in selection order in every lane (the same adds as version 1), then lane j writes
//      weight j with version 1's statements. A row with a NaN v (a NaN logit or bias) leaves that total
//      order: version 1's insertions then depend on where the NaN sits (v > NaN and NaN > v are both
//      false), so lane 0 runs version 1's loop statement for statement on the row's values in shared
//      memory: the same ids and weights in every case. The logits are left unchanged (version 1
//      overwrites them with s; no caller reads them). H200: 0.126 ms a chunk of 16,384 rows (6.0x),
//      0.441 ms for 65,536 rows (4.9x; 0.55 TB/s of logits read).
#include "common.cuh"

// k_route_topk: logits (rows x E, overwritten by s = sigmoid(logits)), bias (E), ids and weights (rows x K).
// Launch: blockDim 128, gridDim ceil(rows / 128).
extern "C" __global__ void k_route_topk(int* ids, float* weights, float* logits, const float* bias, i64 rows, int E,
                                        int K, float scale) {
    i64 r = blockIdx.x * (i64)blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float* s = logits + r * E;
    int* id = ids + r * K;
    for (int e = 0; e < E; e++) s[e] = sigmoid_f(s[e]);
    int n = 0;
    for (int e = 0; e < E; e++) {
        float v = __fadd_rn(s[e], bias[e]);
        if (n == K && !(v > __fadd_rn(s[id[K - 1]], bias[id[K - 1]]))) continue;
        int p = n;
        while (p > 0 && v > __fadd_rn(s[id[p - 1]], bias[id[p - 1]])) p--;
        if (n < K) n++;
        for (int q = n - 1; q > p; q--) id[q] = id[q - 1];
        id[p] = e;
    }
    float sum = 0.0f;
    for (int j = 0; j < K; j++) sum = __fadd_rn(sum, s[id[j]]);
    float den = __fadd_rn(sum, 1e-20f);
    for (int j = 0; j < K; j++) weights[r * K + j] = __fmul_rn(__fdiv_rn(s[id[j]], den), scale);
}

// Version 2. Shared memory per warp: v then s, each 32 x P floats, expert e at (e % 32) * P + e / 32 with
// P = route_pitch(E) (odd, so that the lanes' rows fall in distinct banks both when lane l scans its own
// experts and when the warp scans one lane's experts).
__device__ __forceinline__ int route_pitch(int E) { return ((E + 31) / 32) | 1; }

// route_key orders (v, e) by v descending, then e ascending; 0 is below every key (no candidate). Not for
// NaN (the caller takes version 1's path for a row with one).
__device__ __forceinline__ u64 route_key(float v, int e) {
    u32 u = __float_as_uint(v);
    if ((u & 0x7fffffffu) == 0) u = 0;                  // -0 == +0 in version 1's comparisons
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);     // monotone in v; -inf gives 0x007fffff, not 0
    return ((u64)u << 32) | (u64)(~(u32)e);
}

__device__ __forceinline__ u64 warp_max_u64(u64 k) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        u64 x = __shfl_xor_sync(0xffffffffu, k, o);
        k = x > k ? x : k;
    }
    return k;
}

// k_route_topk_v2: as k_route_topk (ids and weights rows x K), logits read only.
// Launch: blockDim 32 * warps, gridDim ceil(rows / warps), dynamic shared memory warps * 2 * 32 * P * 4
// bytes (P = route_pitch(E)); Route in moe.go.
extern "C" __global__ void k_route_topk_v2(int* ids, float* weights, const float* logits, const float* bias, i64 rows,
                                           int E, int K, float scale) {
    extern __shared__ float route_smem[];
    const int lane = threadIdx.x & 31, P = route_pitch(E);
    i64 r = blockIdx.x * (i64)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return; // the whole warp
    float* sv = route_smem + (i64)(threadIdx.x >> 5) * 64 * P;
    float* ss = sv + 32 * P;
    const float* lg = logits + r * E;
    int* id = ids + r * K;
    float* wt = weights + r * K;
    u64 best = 0;
    bool nan = false;
    for (int e = lane, m = 0; e < E; e += 32, m++) {
        float s = sigmoid_f(lg[e]);
        float v = __fadd_rn(s, bias[e]);
        ss[lane * P + m] = s;
        sv[lane * P + m] = v;
        nan |= isnan(v);
        u64 key = route_key(v, e);
        best = key > best ? key : best;
    }
    __syncwarp();
    if (__any_sync(0xffffffffu, nan)) {
        if (lane != 0) return;
        // version 1's statements; v there is recomputed as s + bias, here read back: the same value
        int n = 0;
        for (int e = 0; e < E; e++) {
            float v = sv[(e & 31) * P + (e >> 5)];
            if (n == K && !(v > sv[(id[K - 1] & 31) * P + (id[K - 1] >> 5)])) continue;
            int p = n;
            while (p > 0 && v > sv[(id[p - 1] & 31) * P + (id[p - 1] >> 5)]) p--;
            if (n < K) n++;
            for (int q = n - 1; q > p; q--) id[q] = id[q - 1];
            id[p] = e;
        }
        float sum = 0.0f;
        for (int j = 0; j < K; j++) sum = __fadd_rn(sum, ss[(id[j] & 31) * P + (id[j] >> 5)]);
        float den = __fadd_rn(sum, 1e-20f);
        for (int j = 0; j < K; j++) wt[j] = __fmul_rn(__fdiv_rn(ss[(id[j] & 31) * P + (id[j] >> 5)], den), scale);
        return;
    }
    float sum = 0.0f;
    for (int j = 0; j < K; j++) {
        u64 top = warp_max_u64(best);
        int e = (int)~(u32)top;
        int owner = e & 31;
        if (lane == (j & 31)) id[j] = e;
        sum = __fadd_rn(sum, ss[owner * P + (e >> 5)]); // selection order, the same in every lane
        if (j == K - 1) break;
        u64 cand = 0; // the owner's best expert below top: lane l looks at its experts m = l, l + 32, ...
        for (int m = lane; owner + 32 * m < E; m += 32) {
            u64 key = route_key(sv[owner * P + m], owner + 32 * m);
            if (key < top && key > cand) cand = key;
        }
        cand = warp_max_u64(cand);
        if (lane == owner) best = cand;
    }
    float den = __fadd_rn(sum, 1e-20f);
    for (int j = lane; j < K; j += 32) { // id[j] was written by this lane
        int e = id[j];
        wt[j] = __fmul_rn(__fdiv_rn(ss[(e & 31) * P + (e >> 5)], den), scale);
    }
}
