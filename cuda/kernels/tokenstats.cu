// tokenstats.cu: the next-token reductions of TokenStats over rows of rounded logits (n x V), which
// k_matmul_* computes a chunk of rows at a time.
//
// Versions:
//   1. one block of 256 threads per row. max (exact in any order); S = sum exp(l - m) and T = sum e * (l - m)
//      in double, thread t adding v = t, t+256, ... in ascending order, then a fixed tree (warp butterfly,
//      then the 8 warp sums in ascending order by thread 0): the order depends on V only. rank = 1 + the
//      count of logits strictly above the target's (integers: exact). Top k without sorting V values: a
//      radix select (4 passes of 8 bits over order-preserving keys of the logits, -0 taken as +0) finds
//      the k-th largest logit exactly; thread t then owns ids [t*seg, (t+1)*seg) in order, and prefix sums
//      over threads place the larger logits and the lowest-id ties, so the candidates are the same set
//      whatever the scheduling; each candidate's final place is the count of candidates before it by
//      (logit descending, id ascending). Bit-identical for a row alone or in any chunk. Against the CPU
//      backend (one ascending double sum) S and T differ at double rounding, far below the float32 outputs.
//      Next (not done): fuse with the lm_head matmul per vocabulary tile (online logsumexp) so no chunk of
//      logits is stored; coalesced candidate collection.
#include "common.cuh"

#define TS_THREADS 256
#define TS_WARPS (TS_THREADS / 32)

// key maps a float to a u32 whose unsigned order is the float order (-0 taken as +0).
__device__ __forceinline__ u32 order_key(float v) {
    if (v == 0.0f) v = 0.0f;
    u32 u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// block_sum_i returns the block-wide sum of v in every thread (integers: any order is exact).
__device__ __forceinline__ int block_sum_i(int v, int* red) {
    v = warp_sum_i(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    int s = 0;
    for (int w = 0; w < TS_WARPS; w++) s += red[w];
    return s;
}

// block_exclusive_scan_i returns the sum of v over threads 0 .. threadIdx.x-1 (and total in *total).
__device__ __forceinline__ int block_exclusive_scan_i(int v, int* scan, int* total) {
    __syncthreads();
    scan[threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        int run = 0;
        for (int i = 0; i < TS_THREADS; i++) {
            int x = scan[i];
            scan[i] = run;
            run += x;
        }
        scan[TS_THREADS] = run;
    }
    __syncthreads();
    *total = scan[TS_THREADS];
    return scan[threadIdx.x];
}

// k_token_stats: row r = blockIdx.x of logits (n x V). Outputs: lp[r] (log p(target), 0 without target),
// rank[r] (0 without), ent[r]; topIds / topLp (n x K) ordered by logit descending, ties by id ascending.
// targets[r] < 0 means none. Launch: blockDim 256, gridDim n.
extern "C" __global__ void __launch_bounds__(TS_THREADS) k_token_stats(float* lp, int* rank, float* ent, int* topIds,
                                                                       float* topLp, const float* logits,
                                                                       const int* targets, int V, int K) {
    __shared__ float redf[TS_WARPS];
    __shared__ double redd[2 * TS_WARPS];
    __shared__ int redi[TS_WARPS];
    __shared__ int scan[TS_THREADS + 1];
    __shared__ int hist[256];
    __shared__ u32 sel[3];  // prefix, mask, remaining rank
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    i64 r = blockIdx.x;
    const float* l = logits + r * (i64)V;

    // max
    float m = __uint_as_float(0xff800000u);  // -inf
    for (int v = tid; v < V; v += TS_THREADS) m = fmaxf(m, l[v]);
    m = warp_max(m);
    if (lane == 0) redf[warp] = m;
    __syncthreads();
    m = redf[0];
    for (int w = 1; w < TS_WARPS; w++) m = fmaxf(m, redf[w]);

    // S and T in double
    double S = 0.0, T = 0.0, md = (double)m;
    for (int v = tid; v < V; v += TS_THREADS) {
        double x = __dsub_rn((double)l[v], md);
        double e = exp(x);
        S = __dadd_rn(S, e);
        T = __dadd_rn(T, __dmul_rn(e, x));
    }
    S = warp_sum_d(S);
    T = warp_sum_d(T);
    if (lane == 0) {
        redd[warp] = S;
        redd[TS_WARPS + warp] = T;
    }
    __syncthreads();
    S = redd[0];
    T = redd[TS_WARPS];
    for (int w = 1; w < TS_WARPS; w++) {
        S = __dadd_rn(S, redd[w]);
        T = __dadd_rn(T, redd[TS_WARPS + w]);
    }
    double logS = log(S);
    double lse = __dadd_rn(md, logS);

    // target
    int target = targets[r];
    float lt = target >= 0 ? l[target] : 0.0f;
    int above = 0;
    if (target >= 0)
        for (int v = tid; v < V; v += TS_THREADS) above += l[v] > lt ? 1 : 0;
    above = block_sum_i(above, redi);
    if (tid == 0) {
        ent[r] = (float)__dsub_rn(logS, __ddiv_rn(T, S));
        lp[r] = target >= 0 ? (float)__dsub_rn((double)lt, lse) : 0.0f;
        rank[r] = target >= 0 ? 1 + above : 0;
    }
    if (K == 0) return;

    // radix select: the K-th largest key
    if (tid == 0) {
        sel[0] = 0u;
        sel[1] = 0u;
        sel[2] = (u32)K;
    }
    for (int pass = 0; pass < 4; pass++) {
        int shift = 24 - 8 * pass;
        hist[tid] = 0;  // TS_THREADS == 256 bins
        __syncthreads();
        u32 prefix = sel[0], mask = sel[1];
        for (int v = tid; v < V; v += TS_THREADS) {
            u32 key = order_key(l[v]);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1);
        }
        __syncthreads();
        if (tid == 0) {
            u32 need = sel[2], cum = 0;
            int b = 255;
            for (; b > 0; b--) {
                if (cum + (u32)hist[b] >= need) break;
                cum += (u32)hist[b];
            }
            sel[0] = prefix | ((u32)b << shift);
            sel[1] = mask | (255u << shift);
            sel[2] = need - cum;
        }
        __syncthreads();
    }
    u32 kth = sel[0];
    int ties = (int)sel[2];  // how many of the logits equal to the k-th are taken (lowest ids first)
    int greater = K - ties;

    // candidates: thread tid owns ids [lo, hi) in order
    int seg = (V + TS_THREADS - 1) / TS_THREADS;
    int lo = min(V, tid * seg), hi = min(V, lo + seg);
    int ng = 0, nt = 0;
    for (int v = lo; v < hi; v++) {
        u32 key = order_key(l[v]);
        ng += key > kth ? 1 : 0;
        nt += key == kth ? 1 : 0;
    }
    int total;
    int gOff = block_exclusive_scan_i(ng, scan, &total);
    int tOff = block_exclusive_scan_i(nt, scan, &total);
    // stage the candidate ids in topLp's row (as int bits): greater ones first, then the ties
    int* cand = (int*)(topLp + r * (i64)K);
    for (int v = lo; v < hi; v++) {
        u32 key = order_key(l[v]);
        if (key > kth) {
            cand[gOff++] = v;
        } else if (key == kth) {
            if (tOff < ties) cand[greater + tOff] = v;
            tOff++;
        }
    }
    __syncthreads();
    // final place of each candidate: the count of candidates ahead of it
    int* out = topIds + r * (i64)K;
    for (int i = tid; i < K; i += TS_THREADS) {
        int id = cand[i];
        float x = l[id];
        int pos = 0;
        for (int j = 0; j < K; j++) {
            int o = cand[j];
            float y = l[o];
            pos += (y > x || (y == x && o < id)) ? 1 : 0;
        }
        out[pos] = id;
    }
    __syncthreads();
    for (int i = tid; i < K; i += TS_THREADS)
        topLp[r * (i64)K + i] = (float)__dsub_rn((double)l[out[i]], lse);
}
