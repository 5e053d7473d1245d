// mla.cu: causal softmax attention per sequence and head without positions (K3_SPEC.md 5.3), the
// MLA op of replay/ops: the key of head h at row s is [kv[s, h*(nope+vdim) : +nope] ; ks[s, :]], the
// value kv[s, h*(nope+vdim)+nope : +vdim], the query q[t, h*qk : (h+1)*qk] with qk = nope + shared.
//
// Versions:
//   1. one block of 128 threads per (query tile, head): a tile is up to QB = 16 consecutive rows of one
//      sequence; keys are walked in chunks of KC = 32 rows aligned to the sequence start, with an online
//      softmax (no T x T matrix): per query, chunk c updates the running max m, the running sum l and
//      the accumulator acc once (rescaled by exp(m_old - m_new)), then out = rnd(acc / l). Each score is
//      one float32 dot in ascending dimension order, divided by sqrt(qk) (the CPU backend's score); p and
//      p*v sums run in ascending key order inside a chunk. A query's arithmetic depends only on its own
//      row, its sequence's keys and the chunk grid anchored at the sequence start, never on the tile it
//      shares or the wave, so results are batch invariant. Against the CPU backend (two passes: max,
//      then exp / sum) it differs at float32 rounding level. Shared memory rows of keys are padded by one
//      word (qk + 1) so that the 32 lanes scoring one query read 32 banks.
//      Keys in parts (with mla_tc.cu's version 3): a sequence's keys may come in parts, one launch each
//      (cuda/slice.go: a slice continuing a long sequence expands its earlier keys a chunk at a time):
//      the tiles of the sequence at row 0 walk only the part's chunks, from the Acc, M and L the previous
//      launch saved, saving them unless the part is the last; same chunks, same order, same arithmetic:
//      the bits of one launch.
//      The tensor-core version (BF16 precision) is mla_tc.cu; this version stays for FP32 precision,
//      Options.NoTensorCores and head sizes mla_tc.cu has no instantiation for.
#include "common.cuh"

#define QB 16
#define KC 32
#define MLA_THREADS 128

// k_mla: tasks[3*b .. 3*b+2] = (sequence start row, first query row t0, end row t1) of tile b =
// blockIdx.x; head h = blockIdx.y.
// Launch: blockDim 128, gridDim (tiles, heads), dynamic shared memory
// (QB*qk + KC*(qk+1) + KC*vdim + QB*KC + QB*vdim + 3*QB) * 4 bytes. st == nullptr: every tile walks its
// whole sequence. Otherwise the tiles of the sequence at row 0 walk keys klo .. khi - 1 (multiples of KC;
// khi < 0: to the end), restoring Acc, M and L from st when klo > 0 and saving them there instead of
// writing out when khi >= 0 (QB * vdim + 2 * QB floats per (tile (t0 - st0) / QB, head)).
extern "C" __global__ void __launch_bounds__(MLA_THREADS) k_mla(float* out, const float* q, const float* kv,
                                                                const float* ks, const int* tasks, int heads,
                                                                int nope, int shared, int vdim, float div, int bf,
                                                                i64 klo, i64 khi, float* st, i64 st0) {
    extern __shared__ float smem[];
    int qk = nope + shared, kvw = nope + vdim, kst = qk + 1;
    float* Qs = smem;                // QB x qk
    float* Ks = Qs + QB * qk;        // KC x (qk+1)
    float* Vs = Ks + KC * kst;       // KC x vdim
    float* Sc = Vs + KC * vdim;      // QB x KC: scores, then exp(score - m)
    float* Acc = Sc + QB * KC;       // QB x vdim
    float* M = Acc + QB * vdim;      // QB: running max
    float* L = M + QB;               // QB: running sum
    float* Scale = L + QB;           // QB: this chunk's rescale factor; < 0: the query skips the chunk

    int tid = threadIdx.x;
    int h = blockIdx.y;
    i64 start = tasks[3 * blockIdx.x], t0 = tasks[3 * blockIdx.x + 1], t1 = tasks[3 * blockIdx.x + 2];
    int nq = (int)(t1 - t0);
    i64 qcols = (i64)heads * qk, kvcols = (i64)heads * kvw, ocols = (i64)heads * vdim;

    for (int idx = tid; idx < QB * qk; idx += MLA_THREADS) {
        int qi = idx / qk, i = idx - qi * qk;
        Qs[idx] = qi < nq ? q[(t0 + qi) * qcols + (i64)h * qk + i] : 0.0f;
    }
    // keys in parts: the tiles of the sequence at row 0 walk only keys klo .. khi - 1 (khi < 0:
    // to the end), from the state an earlier launch saved, saving theirs when they stop short of the end
    i64 c0lo = start, c0hi = t1;
    bool restore = false, save = false;
    float* mine = nullptr;
    if (start == 0 && st != nullptr) {
        c0lo = klo;
        if (khi >= 0) c0hi = khi;
        restore = klo > 0;
        save = khi >= 0;
        mine = st + (((t0 - st0) / QB) * heads + h) * (i64)(QB * vdim + 2 * QB);
    }
    for (int idx = tid; idx < QB * vdim; idx += MLA_THREADS) Acc[idx] = restore ? mine[idx] : 0.0f;
    if (restore && tid < QB) {
        M[tid] = mine[QB * vdim + tid];
        L[tid] = mine[QB * vdim + QB + tid];
    }
    __syncthreads();

    for (i64 c0 = c0lo; c0 < c0hi; c0 += KC) {
        int nk = (int)min((i64)KC, t1 - c0);  // keys of this chunk that some query of the tile can see
        bool first = c0 == start;
        for (int idx = tid; idx < KC * qk; idx += MLA_THREADS) {
            int si = idx / qk, i = idx - si * qk;
            float x = 0.0f;
            if (si < nk) {
                i64 s = c0 + si;
                x = i < nope ? kv[s * kvcols + (i64)h * kvw + i] : ks[s * shared + (i - nope)];
            }
            Ks[si * kst + i] = x;
        }
        for (int idx = tid; idx < KC * vdim; idx += MLA_THREADS) {
            int si = idx / vdim, j = idx - si * vdim;
            Vs[idx] = si < nk ? kv[(c0 + si) * kvcols + (i64)h * kvw + nope + j] : 0.0f;
        }
        __syncthreads();
        // scores of the visible keys: s <= t
        for (int idx = tid; idx < QB * KC; idx += MLA_THREADS) {
            int qi = idx / KC, si = idx - qi * KC;
            i64 t = t0 + qi, s = c0 + si;
            float sc = 0.0f;
            if (qi < nq && si < nk && s <= t) {
                const float* qr = Qs + qi * qk;
                const float* kr = Ks + si * kst;
                float acc = 0.0f;
                for (int i = 0; i < qk; i++) acc = __fadd_rn(acc, __fmul_rn(qr[i], kr[i]));
                sc = __fdiv_rn(acc, div);
            }
            Sc[idx] = sc;
        }
        __syncthreads();
        // per query: the chunk's max, the new running max, exp(score - max) in ascending key order
        if (tid < QB) {
            int qi = tid;
            i64 t = t0 + qi;
            float scale = -1.0f;
            if (qi < nq && c0 <= t) {
                int last = (int)min((i64)nk - 1, t - c0);  // the last visible key of the chunk
                float* sr = Sc + qi * KC;
                float cm = sr[0];
                for (int si = 1; si <= last; si++) cm = fmaxf(cm, sr[si]);
                float mnew = first ? cm : fmaxf(M[qi], cm);
                scale = first ? 0.0f : exp_f(__fsub_rn(M[qi], mnew));
                float psum = 0.0f;
                for (int si = 0; si <= last; si++) {
                    float e = exp_f(__fsub_rn(sr[si], mnew));
                    sr[si] = e;
                    psum = __fadd_rn(psum, e);
                }
                L[qi] = first ? psum : __fadd_rn(__fmul_rn(L[qi], scale), psum);
                M[qi] = mnew;
            }
            Scale[qi] = scale;
        }
        __syncthreads();
        for (int idx = tid; idx < QB * vdim; idx += MLA_THREADS) {
            int qi = idx / vdim, j = idx - qi * vdim;
            float scale = Scale[qi];
            if (scale < 0.0f) continue;
            i64 t = t0 + qi;
            int last = (int)min((i64)nk - 1, t - c0);
            const float* pr = Sc + qi * KC;
            float pv = 0.0f;
            for (int si = 0; si <= last; si++) pv = __fadd_rn(pv, __fmul_rn(pr[si], Vs[si * vdim + j]));
            Acc[idx] = first ? pv : __fadd_rn(__fmul_rn(Acc[idx], scale), pv);
        }
        __syncthreads();
    }
    if (save) {  // the next launch goes on from exactly this state
        for (int idx = tid; idx < QB * vdim; idx += MLA_THREADS) mine[idx] = Acc[idx];
        if (tid < QB) {
            mine[QB * vdim + tid] = M[tid];
            mine[QB * vdim + QB + tid] = L[tid];
        }
        return;
    }
    for (int idx = tid; idx < QB * vdim; idx += MLA_THREADS) {
        int qi = idx / vdim, j = idx - qi * vdim;
        if (qi < nq) out[(t0 + qi) * ocols + (i64)h * vdim + j] = rnd(__fdiv_rn(Acc[idx], L[qi]), bf);
    }
}
