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
//      the parallelism.
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
