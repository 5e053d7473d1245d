// tokenstats.cu: the next-token reductions of TokenStats over rows of logits (n x V), which the lm_head
// matmul computes a chunk of rows at a time (cuda/logits.go). The plain loop is Backend.TokenStats' doc
// comment and replay/cpu's TokenStats.
//
// k_token_stats: one block of 256 threads per row.
//   - max (exact in any order); S = sum exp(l - m) and T = sum e * (l - m) in double, thread t adding
//     v = t, t+256, ... in ascending order, then a fixed tree (warp butterfly, then the 8 warp sums in
//     ascending order): the order depends on V only. rank = 1 + the count of logits strictly above the
//     target's (integers: exact). Against the CPU backend (one ascending double sum) S and T differ at
//     double rounding, far below the float32 outputs.
//   - top k without sorting V values: a radix select over order-preserving keys of the logits (-0 taken
//     as +0) finds the k-th largest logit exactly, a byte at a time; the candidates (the larger logits
//     and the lowest-id ties) are the same set whatever the scheduling, and each candidate's final place
//     is the count of candidates before it by (logit descending, id ascending). Bit-identical for a row
//     alone or in any chunk.
//   - four passes over a row of bfloat16 values: max with the radix select's first histogram (which needs
//     no prefix); S, T, the rank count and the second histogram (all need only m, the target's logit and
//     the first byte of the k-th key); the count; the collection. Rows of bfloat16 values (every float's
//     low 16 bits zero, checked in the first pass) skip the last two histogram passes: all keys under the
//     16-bit prefix then share their low 16 bits, so those passes would put every one in one bin. Float32
//     rows (FP32 precision) run all four radix passes.
//   - histogram adds aggregated per warp (__match_any_sync: one shared atomic per distinct bin);
//     candidates collected coalesced: warp w owns ids [w*seg, (w+1)*seg) and steps through them 32 at a
//     time, placing each lane's candidate by ballot prefix counts, so its ties come in id order;
//   - each pass reads 8 logits a thread before using them (in the one-at-a-time order), so that enough
//     loads are in flight for a row streamed from DRAM;
//   - bf: round every logit read to bfloat16, so the lm_head's unrounded float32 output on cuBLASLt can
//     be read directly (no separate rounding pass); rnd is idempotent, so rounded logits give the same
//     bits.
//
// Removed version: the first kernel (nine passes over a BF16 row, one load a thread at a time, candidates
// placed by one thread's exclusive scan): the same bits, 496 ms of stats kernel at 65,536 K3 rows against
// this one's 111 ms (one load a thread at a time, this one took 141 ms: latency-bound) on the H200
// (cuda/records/JOURNAL.md, run 19, and "Removed kernel versions").
// Next (not done): fuse with the lm_head matmul per vocabulary tile (online logsumexp) so no chunk of
// logits is stored.
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

// hist_add adds one to hist[bin] for every lane of the (full) warp whose bin >= 0, with one shared atomic
// per distinct bin (integer counts: any order is exact). Every lane of the warp must call it.
__device__ __forceinline__ void hist_add(int* hist, int bin, int lane) {
    u32 peers = __match_any_sync(0xffffffffu, bin);
    if (bin >= 0 && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
}

// select_byte is one step of the radix select, by thread 0 after the histogram of the keys under prefix
// sel[0] (mask sel[1]) at bits [shift, shift+8): it appends the byte of the sel[2]-th largest key (bin by bin
// from the top) and leaves in sel[2] its rank among the keys with the longer prefix.
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

// The passes read TS_UNROLL logits a thread before using them (loads in flight: a row is read
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

// k_token_stats: row r = blockIdx.x of logits (n x V), each logit read rounded with rnd(., bf). Outputs:
// lp[r] (log p(target), 0 without target), rank[r] (0 without), ent[r]; topIds / topLp (n x K) ordered by
// logit descending, ties by id ascending. targets[r] < 0 means none. Launch: blockDim 256, gridDim n.
extern "C" __global__ void __launch_bounds__(TS_THREADS) k_token_stats(float* lp, int* rank, float* ent, int* topIds,
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

    // pass 2: S and T in double (the fixed order above), the rank count, the histogram of the second byte
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
