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
//   2. k_token_stats2: version 1's results bit for bit in fewer passes over the row (H200 timing:
//      cuda/NOTES.md, "TokenStats chunks and version 2"). The same per-thread order (thread t reads
//      v = t, t+256, ... ascending) and the same trees for max, S and T; what changed:
//      - passes fused: max with the radix select's first histogram (which needs no prefix), and S, T, the
//        rank count and the second histogram in one pass (all need only m, the target's logit and the
//        first byte of the k-th key). Rows of bfloat16 values (every float's low 16 bits zero, checked in
//        the first pass) skip the last two histogram passes: all keys under the 16-bit prefix then share
//        their low 16 bits (0 when positive, 0xffff when negative: order_key complements negatives), so
//        those passes would put every one in one bin and leave the remaining rank as it is. Passes over a
//        BF16 row: 4 (max+hist, sums+rank+hist, count, collect) instead of 9.
//      - histogram adds aggregated per warp (__match_any_sync: one shared atomic per distinct bin, where
//        logits of one magnitude hit one or two bins of the first byte from every lane);
//      - candidates collected coalesced: warp w owns ids [w*seg, (w+1)*seg) and steps through them 32 at a
//        time, placing each lane's candidate by ballot prefix counts, so its ties still come in id order
//        and the lowest-id ties are the ones taken; a warp stops once its candidates are placed;
//      - each pass reads 8 logits a thread before using them (in the one-at-a-time order), so that enough
//        loads are in flight for a row streamed from DRAM (one at a time: 141 ms of stats kernel at
//        65,536 K3 rows on the H200, latency-bound);
//      - bf: round every logit read to bfloat16 (rnd), so the lm_head's unrounded float32 output can be
//        read directly (TokenStats skips gemm's k_round pass on cuBLASLt): rnd is idempotent, so rounded
//        logits read with bf set give the same bits too.
//      Next (not done): fuse with the lm_head matmul per vocabulary tile (online logsumexp) so no chunk of
//      logits is stored.
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

// hist_add adds one to hist[bin] for every lane of the (full) warp whose bin >= 0, with one shared atomic
// per distinct bin (integer counts: any order is exact). Every lane of the warp must call it.
__device__ __forceinline__ void hist_add(int* hist, int bin, int lane) {
    u32 peers = __match_any_sync(0xffffffffu, bin);
    if (bin >= 0 && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
}

// select_byte is one step of the radix select, by thread 0 after the histogram of the keys under prefix
// sel[0] (mask sel[1]) at bits [shift, shift+8): it appends the byte of the sel[2]-th largest key (version 1's
// rule, bin by bin from the top) and leaves in sel[2] its rank among the keys with the longer prefix.
__device__ __forceinline__ void select_byte(const int* hist, u32* sel, int shift) {
    u32 need = sel[2], cum = 0;
    int b = 255;
    for (; b > 0; b--) {
        if (cum + (u32)hist[b] >= need) break;
        cum += (u32)hist[b];
    }
    sel[0] |= (u32)b << shift;
    sel[1] |= 255u << shift;
    sel[2] = need - cum;
}

// Version 2's passes read TS_UNROLL logits a thread before using them (loads in flight: a row is read
// from DRAM, and one load a thread at a time left the passes latency-bound), then use them in the order of
// the one-at-a-time loop: thread t still adds v = t, t+256, ... in ascending order.
#define TS_UNROLL 8
#define TS_STEP (TS_THREADS * TS_UNROLL)

// ts_load reads xs[j] = rnd(l[base + j*stride], bf) for the indices below end (0 past it).
__device__ __forceinline__ void ts_load(float* xs, const float* l, int base, int end, int stride, int bf) {
#pragma unroll
    for (int j = 0; j < TS_UNROLL; j++) {
        int v = base + j * stride;
        xs[j] = v < end ? rnd(l[v], bf) : 0.0f;
    }
}

// k_token_stats2: version 2, the outputs of k_token_stats bit for bit (see Versions), reading logits
// rounded with rnd(., bf). Launch: blockDim 256, gridDim n.
extern "C" __global__ void __launch_bounds__(TS_THREADS) k_token_stats2(float* lp, int* rank, float* ent, int* topIds,
                                                                        float* topLp, const float* logits,
                                                                        const int* targets, int V, int K, int bf) {
    __shared__ float redf[TS_WARPS];
    __shared__ double redd[2 * TS_WARPS];
    __shared__ int redi[TS_WARPS];
    __shared__ u32 redu[TS_WARPS];
    __shared__ int wcnt[2 * TS_WARPS];
    __shared__ int hist[256];
    __shared__ u32 sel[3];  // prefix, mask, remaining rank
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    i64 r = blockIdx.x;
    const float* l = logits + r * (i64)V;
    bool topk = K > 0;

    // pass 1: max, the OR of the floats' low 16 bits, the histogram of the keys' first byte
    hist[tid] = 0;  // TS_THREADS == 256 bins
    if (tid == 0) {
        sel[0] = 0u;
        sel[1] = 0u;
        sel[2] = (u32)K;
    }
    __syncthreads();
    float m = __uint_as_float(0xff800000u);  // -inf
    u32 low = 0;
    for (int base = tid; base < V + tid; base += TS_STEP) {  // base < V + tid: the same bound in every lane
        float xs[TS_UNROLL];
        ts_load(xs, l, base, V, TS_THREADS, bf);
#pragma unroll
        for (int j = 0; j < TS_UNROLL; j++) {
            bool in = base + j * TS_THREADS < V;
            float x = xs[j];
            if (in) {
                m = fmaxf(m, x);
                low |= __float_as_uint(x) & 0xffffu;
            }
            if (topk) hist_add(hist, in ? (int)(order_key(x) >> 24) : -1, lane);
        }
    }
    m = warp_max(m);
    low = __reduce_or_sync(0xffffffffu, low);
    if (lane == 0) {
        redf[warp] = m;
        redu[warp] = low;
    }
    __syncthreads();
    m = redf[0];
    for (int w = 1; w < TS_WARPS; w++) m = fmaxf(m, redf[w]);
    low = 0;
    for (int w = 0; w < TS_WARPS; w++) low |= redu[w];
    if (topk && tid == 0) select_byte(hist, sel, 24);
    __syncthreads();

    // pass 2: S and T in double (version 1's order), the rank count, the histogram of the second byte
    hist[tid] = 0;
    __syncthreads();
    int target = targets[r];
    float lt = target >= 0 ? rnd(l[target], bf) : 0.0f;
    u32 prefix = sel[0], mask = sel[1];
    double S = 0.0, T = 0.0, md = (double)m;
    int above = 0;
    for (int base = tid; base < V + tid; base += TS_STEP) {
        float xs[TS_UNROLL];
        ts_load(xs, l, base, V, TS_THREADS, bf);
#pragma unroll
        for (int j = 0; j < TS_UNROLL; j++) {
            bool in = base + j * TS_THREADS < V;
            float x = xs[j];
            if (in) {
                double xd = __dsub_rn((double)x, md);
                double e = exp(xd);
                S = __dadd_rn(S, e);
                T = __dadd_rn(T, __dmul_rn(e, xd));
                above += target >= 0 && x > lt ? 1 : 0;
            }
            if (topk) {
                u32 key = order_key(x);
                int bin = in && (key & mask) == prefix ? (int)((key >> 16) & 255u) : -1;
                if (__any_sync(0xffffffffu, bin >= 0)) hist_add(hist, bin, lane);
            }
        }
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
    above = block_sum_i(above, redi);  // its barrier also orders the histogram's adds before select_byte
    if (tid == 0) {
        ent[r] = (float)__dsub_rn(logS, __ddiv_rn(T, S));
        lp[r] = target >= 0 ? (float)__dsub_rn((double)lt, lse) : 0.0f;
        rank[r] = target >= 0 ? 1 + above : 0;
    }
    if (!topk) return;
    if (tid == 0) select_byte(hist, sel, 16);
    __syncthreads();

    // the last two bytes: from the data, or, for bfloat16 values, what their passes would find
    if (low == 0) {
        if (tid == 0) {
            sel[0] |= (sel[0] & 0x80000000u) ? 0u : 0xffffu;
            sel[1] = 0xffffffffu;
        }
        __syncthreads();
    } else {
        for (int shift = 8; shift >= 0; shift -= 8) {
            hist[tid] = 0;
            __syncthreads();
            prefix = sel[0];
            mask = sel[1];
            for (int base = tid; base < V + tid; base += TS_STEP) {
                float xs[TS_UNROLL];
                ts_load(xs, l, base, V, TS_THREADS, bf);
#pragma unroll
                for (int j = 0; j < TS_UNROLL; j++) {
                    u32 key = order_key(xs[j]);
                    int bin = base + j * TS_THREADS < V && (key & mask) == prefix ? (int)((key >> shift) & 255u) : -1;
                    if (__any_sync(0xffffffffu, bin >= 0)) hist_add(hist, bin, lane);
                }
            }
            __syncthreads();
            if (tid == 0) select_byte(hist, sel, shift);
            __syncthreads();
        }
    }
    u32 kth = sel[0];
    int ties = (int)sel[2];  // how many of the logits equal to the k-th are taken (lowest ids first)
    int greater = K - ties;

    // candidates: warp w owns ids [lo, hi) in order, read 32 at a time; first count, then place
    int seg = (V + TS_WARPS - 1) / TS_WARPS;
    int lo = min(V, warp * seg), hi = min(V, lo + seg);
    int ng = 0, nt = 0;
    for (int base = lo + lane; base < hi + lane; base += 32 * TS_UNROLL) {
        float xs[TS_UNROLL];
        ts_load(xs, l, base, hi, 32, bf);
#pragma unroll
        for (int j = 0; j < TS_UNROLL; j++) {
            u32 key = order_key(xs[j]);
            bool in = base + 32 * j < hi;
            ng += in && key > kth ? 1 : 0;
            nt += in && key == kth ? 1 : 0;
        }
    }
    ng = warp_sum_i(ng);
    nt = warp_sum_i(nt);
    if (lane == 0) {
        wcnt[warp] = ng;
        wcnt[TS_WARPS + warp] = nt;
    }
    __syncthreads();
    int gOff = 0, tOff = 0;
    for (int w = 0; w < warp; w++) {
        gOff += wcnt[w];
        tOff += wcnt[TS_WARPS + w];
    }
    int gEnd = gOff + ng, tEnd = min(ties, tOff + nt);
    // stage the candidate ids in topLp's row (as int bits): greater ones first, then the ties
    int* cand = (int*)(topLp + r * (i64)K);
    u32 below = (1u << lane) - 1u;
    // (past the warp's last candidate no key is greater and no tie is taken: whole steps are harmless)
    for (int base = lo + lane; base < hi + lane && (gOff < gEnd || tOff < tEnd); base += 32 * TS_UNROLL) {
        float xs[TS_UNROLL];
        ts_load(xs, l, base, hi, 32, bf);
#pragma unroll
        for (int j = 0; j < TS_UNROLL; j++) {
            int v = base + 32 * j;
            u32 key = order_key(xs[j]);
            bool gt = v < hi && key > kth, eq = v < hi && key == kth;
            u32 bg = __ballot_sync(0xffffffffu, gt), be = __ballot_sync(0xffffffffu, eq);
            if (gt) cand[gOff + __popc(bg & below)] = v;
            if (eq) {
                int t = tOff + __popc(be & below);
                if (t < ties) cand[greater + t] = v;
            }
            gOff += __popc(bg);
            tOff += __popc(be);
        }
    }
    __syncthreads();
    // final place of each candidate: the count of candidates ahead of it
    int* out = topIds + r * (i64)K;
    for (int i = tid; i < K; i += TS_THREADS) {
        int id = cand[i];
        float x = rnd(l[id], bf);
        int pos = 0;
        for (int j = 0; j < K; j++) {
            int o = cand[j];
            float y = rnd(l[o], bf);
            pos += (y > x || (y == x && o < id)) ? 1 : 0;
        }
        out[pos] = id;
    }
    __syncthreads();
    for (int i = tid; i < K; i += TS_THREADS)
        topLp[r * (i64)K + i] = (float)__dsub_rn((double)rnd(l[out[i]], bf), lse);
}
