// kda_chunk.cu: KDA's gated delta rule (K3_SPEC.md 5.2 steps 3-6) in the chunked form, on the tensor cores,
// for BF16 precision at head widths 64 and 128 (K3's 128). The plain loop it computes is the doc comment
// of Backend.KDA (cuda/kda.go); cuda/kda.go's kdaChunkKernel says when it runs instead of kda.cu's step kernels.
//
// The math (chunks of KC = 16 rows anchored at each sequence's start; S the state at a chunk's start, d x d,
// key rows x value columns; rows t, s of the chunk; G_t = sum_{r <= t} g_r per channel, the log decay
// from the chunk's start through row t; e^ applies per channel):
//   Qt_t = qn_t e^G_t,  Kt_t = kn_t e^G_t,  Ki_t = kn_t e^-G_t,  Kh_t = kn_t e^(G_last - G_t)
//   A[t][s] = beta_t Kt_t . Ki_s (s < t),   P[t][s] = Qt_t . Ki_s (s <= t)
//   M = (I + A)^-1 diag(beta)  (forward substitution),  Wk = M Kt,  Wv = M V
//   U = Wv - Wk S,  O = Qt S + P U,  S' = diag(e^G_last) S + Kh^T U
// which is the step loop's S = diag(e^g) S; u = beta (v - S^T k); S += k u^T; o = S^T q unrolled over the
// chunk (u_t = U[t]; replay/ops/opstest's refKDAChunked derives the same form with chunks of 64). With
// g in (lower, 0) and lower = -5 the exponents stay within 16 * 5 = 80 of zero: e^+-80 is a normal float.
//
// Per block one (sequence, head): D/16 warps, 2D threads. Per chunk: the rows' prep (norms, gate, beta;
// k_kda_prep_fast's formulas, the norms in single precision), the column scans and exponentials, A and P, M, Wk and Wv on the CUDA cores
// in float32 (fused multiply-adds in ascending order); then the three products with the state on the
// tensor cores (mma.sync m16n8k8 tf32, float32 accumulators): warp w keeps value columns 16w .. 16w+15
// of S^T in its accumulator registers, and the accumulators of one product serve as the A operand of the
// next (the k index within each group of 8 permuted so that the C layout is the A layout; the B operand
// is read from shared memory in the same permutation). Each float32 operand is split into a tf32 high
// part and a tf32 low part and each product takes three mma (lo*hi, hi*lo, hi*hi, in that order): the
// products are float32 accurate, where one tf32 mma would leave 2^-10 of each (SPLIT 1, the template's
// other option: version 4 below). The B operands of the first two products (Wk, Qt, P: the same values
// in every warp) are split once a block, before the products, and stored as their two parts; the third
// product's (Kh) are split in each warp as before (version 9 below says why).
//
// Every sum runs in an order fixed by D and the row's place in its chunk; chunks are anchored at the
// sequence start; a row's output depends on the rows before it in its chunk only (rows past a sequence's
// end are zero and meet zero coefficients). So a sequence's bits never depend on the wave, and a slice
// boundary inside a chunk changes nothing: the slice hands on the state at the last chunk start and the
// rows since (pre), and the next slice runs that chunk again from its start (cuda/slice.go).
//
// Versions (H200, 96 heads of 128; the step path k_kda_prep_fast + k_kda_fast_r128 in the same runs:
// 31.0 ms at 16 x 4,096 tokens, 78.1 ms at 1 x 65,536; cuda/records/JOURNAL.md, runs 59-64):
//   1. One block per (sequence, head), 2 blocks an SM, each chunk's rows loaded from global memory at
//      its start: 32.8 ms and 75.1 ms (one tf32 mma a product: 26.7 and 64.2 ms, 4.2% of the outputs a
//      bfloat16 ulp off the CPU backend, some by more: not kept). One block an SM (162 registers, no
//      spills): 54.8 ms. Correct at once (layouts first checked in a float64 emulation of the fragments).
//   2. The next chunk's rows staged in shared memory by cp.async while this chunk computes, the norms in
//      single precision, e^-G as a reciprocal of e^G (16 exponentials a channel instead of 64), A and P
//      with four partial sums: 30.5 and 63.3 ms. Clock profile of a chunk (thread 0 of a block; 29,800
//      cycles at 1 x 65,536): rows 14%, columns 12%, A and P 18%, M 7%, W 5%, the products 45%; 48 bytes
//      of spills a thread (128 registers for 2 blocks an SM; the state alone takes 64).
//   3. Phases 2 and 5 hold four rows at a time instead of sixteen beside the state (32 bytes of spills
//      left): 28.8 and 59.6 ms; profile as version 2 (the products 46%). In the k3-layer bench at
//      262,144 tokens (64 x 4,096, 4 slices) 141 ms a kda+moe layer against the step path's 147 (run 62).
//   4. The split by clearing the low mantissa bits instead of three cvt.rna.tf32 a value:
//      24.6 and 52.9 ms (1.26x and 1.47x the step path), the products 35% of a chunk's 25,300 cycles;
//      0.006% of the outputs one ulp off the exact path (run 63). The one-mma form (SPLIT 1, the operands'
//      bits truncated by the tensor cores) is 17.9 and 40.6 ms but leaves 9% of the outputs off, some by
//      several ulps: kept only as the template's option, not instantiated.
//   4b. graw and braw rounded as they are read for the gate and beta: their projections reach the kernel
//      with the rounding deferred (cuda/deferred.go). A no-op on rounded inputs; q, k, v come rounded.
//   7. Phase 2 on every thread, two a channel (each runs the channel's scan, then scales half
//      its rows); phases 4 and 5 load the rows of A and M in 16-byte broadcasts: the same operations in
//      the same order (version 4's bits, checked on the H200 before version 4 was removed, run 104):
//      24.21 -> 24.01 ms at 16 x 4,096, 51.0 -> 49.4 at 1 x 65,536; columns 11.6% -> 8.3% of a chunk.
//   8. From Nsight Compute (run 106: 29,400 instructions a block and chunk, issue slots 49%
//      busy, stalls mostly on fixed-latency dependencies; 66 million spill requests a launch): the gate's
//      reciprocals by frcp_fast (common.cuh: __frcp_rn's fast path without its branch, so the channels'
//      chains interleave; __frcp_rn for a warp where it does not apply), dtBias in shared memory (its
//      registers were spilled and reloaded a row), the staging of a chunk inside its sequence with 32-bit
//      offsets from the chunk's first row. The same bits (TestKDATiming's hash of every sequence's last
//      64 rows); 24.04 -> 21.70 ms at 16 x 4,096, 6.87 -> 6.32 at 4 x 4,096, 49.4 -> 50.3 at 1 x
//      65,536; 12% fewer instructions, spill requests 66 -> 12.6 million; a kda+moe layer 1.2186 ->
//      1.2110 s in the bench (run 107).
//   9. (this file) The first two products' B operands split once a block instead of once a warp (the
//      splits were 38% of the products' instructions, run 106): phase 5 stores Wk's tf32 high parts in
//      place and their low parts over Kt, and the warps that phase 4's substitution leaves idle do the
//      same for Qt (low parts over Ki) and P (beside its row), which phase 3 read or wrote last; Kt now
//      at sWQ's stride, P's rows twice as wide: 384 floats more a block (98,432 bytes at width 128, 2 an
//      SM; 52,864 at 64, 4). Kh stays split in each warp: stored split as well (tried, its low parts in
//      rows of KhT twice as wide), ptxas hoisted the third product's loads of both parts, and where the
//      split had filled the gaps between dependent HMMAs it put NOPs, so the product was no shorter and
//      the kernel's spills nearly five times v8's (CUDA 11.8's ptxas for sm_90: 112 bytes of spill
//      stores a thread against 24; as kept, 24, and 120 fewer SASS instructions a warp from the
//      products' barrier to the chunk's end, 6%). The norms' two rsqrt by frsqrt_fast (common.cuh: a
//      double-precision Newton step from rsqrt.approx, proven to round to __frsqrt_rn's value where its
//      test passes; __frsqrt_rn for a warp where it fails) without __frsqrt_rn's branch, their warp
//      sums' butterflies interleaved. The same bits (TestKDATiming's hash at all four shapes, run 111);
//      16 x 4,096 20.98 -> 19.91 ms, 4 x 4,096 6.11 -> 5.78, 1 x 65,536 48.83 -> 45.55; the bench's KDA
//      op 107.8 -> 104.0 ms a kda+moe layer at 262,144 tokens (run 112).
//   10. Narrow inputs (k_kda_chunk_r128n, r64n; runs 129-131 on an H100): q, k and v (and their carried
//      rows) read from ShortConvSiLU's narrow-only bfloat16 copies, staged as bfloat16 (one 16-byte piece
//      a thread and row array instead of two) and widened where phases 1 and 5 read them: the same
//      values, the same bits; KDA 102.5 -> 99.3 ms a kda+moe layer at 262,144 tokens (6 slices), the
//      float32 forms kept for inputs that are not narrow-only (the step path's, tests, FP32 precision).
//   Tried and not kept (cuda/records): 5, the short convolutions fused in as a phase 0 (kda_conv_fused.diff,
//   runs 90-93: the phase cost as much as the convolutions alone); 6, phase 3's A and P on the tensor cores
//   in split tf32 (kda_ap_tensor_cores.diff, run 96: 1.6% faster, four times as many outputs off the exact path).
//   Next: producer warps running the next chunk's CUDA-core phases while consumer warps run this chunk's
//   products (the phases now add up, run 104: rows 18%, columns 8%, A and P 22%, M 8%, W 7%); the short
//   convolution and the gated output norm fused in.
#include "common.cuh"

#define KC 16  // rows a chunk

// mma_tf32 is d += a b for one m16n8k8 tile (a: 4 registers, b: 2).
__device__ __forceinline__ void mma_tf32(float* d, const u32* a, const u32* b) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// tf32_hi is x with its low 13 mantissa bits cleared (exact in tf32), tf32_lo is x - tf32_hi(x) (exact in
// float32): the two tf32 parts of x. bhi is the high part an operand carries: tf32_hi(x) (SPLIT 3), or x
// itself (SPLIT 1).
__device__ __forceinline__ float tf32_hi(float x) { return __uint_as_float(__float_as_uint(x) & 0xffffe000u); }
__device__ __forceinline__ float tf32_lo(float x) { return __fsub_rn(x, tf32_hi(x)); }
template <int SPLIT>
__device__ __forceinline__ float bhi(float x) { return SPLIT == 3 ? tf32_hi(x) : x; }

// lds2 loads two floats from shared-memory address a (ld.shared.v2.f32): the products' B operands, each at
// a per-thread base plus a constant (a constant added to a register base folds into the load's offset,
// where the products' float* indexing left three address instructions a load, run 107's profile).
__device__ __forceinline__ float2 lds2(u32 a) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(a));
    return v;
}

// frag is an mma operand of n values split into tf32 parts, hi = tf32_hi(x) and lo = tf32_lo(x), passed
// as float32 bits: the tensor cores read the top 19 bits of a tf32 operand, so lo (below 2^-10 of x)
// loses at most 2^-10 of itself and the two parts are x within 2^-20 of it (SPLIT 3);
// or x's bits alone, truncated by the tensor cores to 2^-10 (SPLIT 1). Clearing bits replaces version
// 3's cvt.rna.tf32.f32 conversions (three a value). set splits x (the A operands, each thread's own, and
// Kh's B operands); load reads a B operand stored split (st_b): hi at shared-memory address a, lo
// (SPLIT 3) lo_bytes above it.
template <int N, int SPLIT>
struct frag {
    u32 hi[N], lo[N];
    __device__ __forceinline__ void set(const float* x) {
#pragma unroll
        for (int i = 0; i < N; i++) {
            hi[i] = __float_as_uint(bhi<SPLIT>(x[i]));
            if (SPLIT == 3) lo[i] = __float_as_uint(tf32_lo(x[i]));
        }
    }
    __device__ __forceinline__ void load(u32 a, u32 lo_bytes) {
        static_assert(N == 2, "a B operand holds two values");
        const float2 h = lds2(a);
        hi[0] = __float_as_uint(h.x), hi[1] = __float_as_uint(h.y);
        if (SPLIT == 3) {
            const float2 l = lds2(a + lo_bytes);
            lo[0] = __float_as_uint(l.x), lo[1] = __float_as_uint(l.y);
        }
    }
};

// st_b stores x as a B operand of the products: bhi(x) at p and (SPLIT 3) tf32_lo(x) at lo, the values
// frag::set would make of x (the same operations, so the same bits), so that the products load them
// split once a block instead of each warp splitting the same values (the splits were 38% of the
// products' instructions, run 106); st_b4 does four at 16-byte addresses.
template <int SPLIT>
__device__ __forceinline__ void st_b(float* p, float* lo, float x) {
    *p = bhi<SPLIT>(x);
    if (SPLIT == 3) *lo = tf32_lo(x);
}
template <int SPLIT>
__device__ __forceinline__ void st_b4(float* p, float* lo, float4 v) {
    *(float4*)p = make_float4(bhi<SPLIT>(v.x), bhi<SPLIT>(v.y), bhi<SPLIT>(v.z), bhi<SPLIT>(v.w));
    if (SPLIT == 3) *(float4*)lo = make_float4(tf32_lo(v.x), tf32_lo(v.y), tf32_lo(v.z), tf32_lo(v.w));
}

// mma_split is d += a b with a and b split: lo*hi, hi*lo, hi*hi (SPLIT 3), or hi*hi.
template <int SPLIT>
__device__ __forceinline__ void mma_split(float* d, const frag<4, SPLIT>& a, const frag<2, SPLIT>& b) {
    if (SPLIT == 3) {
        mma_tf32(d, a.lo, b.hi);
        mma_tf32(d, a.hi, b.lo);
    }
    mma_tf32(d, a.hi, b.hi);
}

// cp16 copies 16 bytes from global src to shared dst asynchronously (cp.async, L2 only), or writes 16 zero
// bytes when !ok (src is then not read).
__device__ __forceinline__ void cp16(void* dst, const void* src, bool ok) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(ok ? 16 : 0));
}
// cp4 is cp16 for 4 bytes (through L1: .cg takes 16 only).
__device__ __forceinline__ void cp4(float* dst, const float* src, bool ok) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(ok ? 4 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;"); }
// in_val widens element i of a staged q, k or v row: float32 values as they are, or bfloat16 bits (the
// narrow inputs: ShortConvSiLU's bfloat16 copies, cuda/narrow.go) exactly.
__device__ __forceinline__ float in_val(const float* p, int i) { return p[i]; }
__device__ __forceinline__ float in_val(const u16* p, int i) { return bf16_to_f32(p[i]); }
// st_out stores an output value (rounded in BF16 precision): as float32, or as its bfloat16 bits (the
// narrow form's narrow-only output, which GatedRMSNorm reads as such: cuda/kda.go).
__device__ __forceinline__ void st_out(float* p, float v) { *p = v; }
__device__ __forceinline__ void st_out(u16* p, float v) { *p = (u16)(__float_as_uint(v) >> 16); }
__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// stage_rows copies rows c0 .. c0+KC-1 of one input of a block's head (D values of type T at hoff in rows
// of ch; rows before first from old, the carried rows, whose first is row vs; zeros past end) into dst,
// KC rows of D values, with cp.async: 16-byte pieces, D * sizeof(T) / 16 a row, thread tid taking pieces
// tid, tid + NT, ... Where every row lies inside the sequence, a piece's address is a 32-bit offset from
// the chunk's first row (t ch < 2^31: cuda/kda.go's kdaChunkKernel takes no wider rows), without the
// general loop's 64-bit arithmetic a piece.
template <int D, int NT, typename T>
__device__ __forceinline__ void stage_rows(T* dst, const T* __restrict__ cur, const T* __restrict__ old, i64 c0, i64 first,
                                           i64 end, i64 vs, i64 ch, i64 hoff, int tid) {
    constexpr int per = D * (int)sizeof(T) / 16, vals = 16 / (int)sizeof(T);
    static_assert(KC * per % NT == 0, "whole pieces a thread");
    if (c0 >= first && c0 + KC <= end) {
        const T* base = cur + c0 * ch + hoff;
#pragma unroll
        for (int i = 0; i < KC * per / NT; i++) {
            const int p = tid + NT * i, t = p / per, j = p % per;
            cp16(dst + t * D + vals * j, base + (t * (int)ch + vals * j), true);
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < KC * per / NT; i++) {
        const int p = tid + NT * i, t = p / per, j = p % per;
        const i64 r = c0 + t;
        const bool ok = r < end;
        const T* src = r < first ? old + (r - vs) * ch + hoff : cur + r * ch + hoff;
        cp16(dst + t * D + vals * j, ok ? src + vals * j : cur, ok);
    }
}

// kda_chunk_smem is the dynamic shared memory of kda_chunk<D>, in floats (each array a multiple of 4 floats,
// so that every one starts 16-byte aligned). The low parts of the B operands of the first two products
// take the space of Kt and Ki (dead by then: sWQ's rows' low parts at sWQ's stride, Kt at that stride
// too) and a row of P twice as wide (high parts, then low parts at KDA_PLO): 384 floats more than
// version 8 at either width, 98,432 bytes a block at width 128 and 52,864 at 64, so that two blocks of
// width 128 (four of 64) share an H200 SM's 228 KiB, 1 KiB of it reserved for each block.
__host__ __device__ constexpr int kda_chunk_ldw(int D) { return D + 8; }  // 8 mod 32: conflict-free float2 B loads
__host__ __device__ constexpr int kda_chunk_ldk(int D) { return D + 4; }  // 4 mod 32: conflict-free float4 row loads
#define KDA_LDT 24  // transposed arrays (D rows of KC): 24 mod 32, conflict-free float2 B loads
#define KDA_LDP 40  // P (KC values, then their low parts): 8 mod 32, conflict-free float2 B loads
#define KDA_PLO 16  // where a row of P's low parts start
#define KDA_LDA 20
__host__ __device__ constexpr int kda_chunk_smem(int D) {
    return 2 * KC * kda_chunk_ldw(D)    // sWQ: Wk rows, then Qt rows (their high parts by the products)
           + 2 * KC * kda_chunk_ldw(D)  // sKt, sKi, then sWQ's low parts
           + 2 * KC * D                 // sV, sG
           + 2 * D * KDA_LDT            // sWvT, sKhT
           + KC * KDA_LDP               // sP
           + 2 * KC * KDA_LDA           // sA, sM
           + 2 * KC * D                 // sRq, sRk: the next chunk's q and k rows, staged
           + KC + KC + D                // sRb (its braw), sBeta, sGam
           + D;                         // sDtb: dtBias of the head (in registers it was spilled)
}
static_assert(2 * (4 * kda_chunk_smem(128) + 1024) <= 228 * 1024, "two blocks of width 128 an SM");
static_assert(4 * (4 * kda_chunk_smem(64) + 1024) <= 228 * 1024, "four blocks of width 64 an SM");

// kda_chunk: see the file's header. Arguments as kda.cu's recurrence kernels, with the raw inputs (q, k, v,
// graw rows x heads*D; braw rows x heads; aLog; dtBias 1 x heads*D) in place of the prep's outputs, and
// npre rows carried from the slice before (pq, pk, pv, pg: npre x heads*D; pb: npre x heads) that
// sequence 0 continues: its chunk grid starts npre rows before row 0. fin receives the last sequence's
// state at its last chunk start (the rows after it are the next carry's pre rows).
// Launch: blockDim 2D, gridDim (sequences, heads), kda_chunk_smem(D) * 4 bytes of dynamic shared memory.
template <int D, int SPLIT, typename TI = float, bool PROF = false>
__device__ __forceinline__ void kda_chunk(TI* __restrict__ out, const TI* __restrict__ q, const TI* __restrict__ k,
                                          const TI* __restrict__ v, const float* __restrict__ graw,
                                          const float* __restrict__ braw, const float* __restrict__ aLog,
                                          const float* __restrict__ dtBias, const int* __restrict__ starts, int heads,
                                          float lower, float scale, int bf, const float* __restrict__ init,
                                          float* __restrict__ fin, const TI* __restrict__ pq,
                                          const TI* __restrict__ pk, const TI* __restrict__ pv,
                                          const float* __restrict__ pg, const float* __restrict__ pb, int npre,
                                          long long* prof = nullptr) {
    constexpr int NW = D / 16, NT = 32 * NW, LDW = kda_chunk_ldw(D), LDK = kda_chunk_ldk(D);
    constexpr int CL = D / 32;  // channels a lane in the row prep
    extern __shared__ float4 smem4[];
    float* sWQ = (float*)smem4;
    float* sQt = sWQ + KC * LDW;
    float* sKt = sWQ + 2 * KC * LDW;  // at stride LDW (its readers take rows a warp or a column a thread)
    float* sKi = sKt + KC * LDW;      // at stride LDK in KC * LDW floats
    float* sWQlo = sKt;  // sWQ's low parts in sWQ's layout: Wk's over Kt (phase 5), Qt's over Ki (phase 4)
    float* sV = sKi + KC * LDW;
    float* sG = sV + KC * D;
    float* sWvT = sG + KC * D;
    float* sKhT = sWvT + D * KDA_LDT;
    float* sP = sKhT + D * KDA_LDT;
    float* sA = sP + KC * KDA_LDP;
    float* sM = sA + KC * KDA_LDA;
    float* sRq = sM + KC * KDA_LDA;
    float* sRk = sRq + KC * D;
    float* sRb = sRk + KC * D;
    float* sBeta = sRb + KC;
    float* sGam = sBeta + KC;
    float* sDtb = sGam + D;

    const int s = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int gid = lane >> 2, tig = lane & 3;
    const i64 ch = (i64)heads * D, hoff = (i64)h * D;
    const i64 first = starts[s], end = starts[s + 1];
    const int np = s == 0 ? npre : 0;
    const i64 vs = first - np;  // the chunk grid's anchor: the sequence's start
    const float rate = exp_f(aLog[h]);
    if (tid < D) sDtb[tid] = dtBias[hoff + tid];  // read after the first chunk's barrier

    // stage(c0, part) copies rows c0 .. c0+KC-1 of the sequence (pre rows before first, zeros past end)
    // into shared memory with cp.async: part 0 q, k (sRq, sRk, as TI), graw (sG), braw (sRb); part 1 v (sV)
    TI* const sRqI = (TI*)sRq;
    TI* const sRkI = (TI*)sRk;
    TI* const sVI = (TI*)sV;
    auto stage = [&](i64 c0, int part) {
        if (part == 0) {
            stage_rows<D, NT>(sRqI, q, pq, c0, first, end, vs, ch, hoff, tid);
            stage_rows<D, NT>(sRkI, k, pk, c0, first, end, vs, ch, hoff, tid);
            stage_rows<D, NT>(sG, graw, pg, c0, first, end, vs, ch, hoff, tid);
        } else {
            stage_rows<D, NT>(sVI, v, pv, c0, first, end, vs, ch, hoff, tid);
        }
        if (part == 0 && tid < KC) {
            const i64 r = c0 + tid;
            const bool ok = r < end, old = r < first;
            cp4(sRb + tid, ok ? (old ? pb + (r - vs) * heads + h : braw + r * heads + h) : braw, ok);
        }
        cp_commit();
    };
    stage(vs, 0);
    stage(vs, 1);

    // S^T in the accumulator layout: st[j][e] = S[dk][dv], dv = 16 warp + gid (+8 for e = 2, 3),
    // dk = 8j + 2 tig (+1 for e = 1, 3)
    float st[D / 8][4];
    const float* S0 = init != nullptr && s == 0 ? init + hoff * D : nullptr;
    const int dv0 = 16 * warp + gid;
#pragma unroll
    for (int j = 0; j < D / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            st[j][e] = S0 != nullptr ? S0[(8 * j + 2 * tig + (e & 1)) * D + dv0 + (e & 2) * 4] : 0.0f;

    long long pt[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tm = PROF ? clock64() : 0;
    // mark(i): with PROF, thread 0 adds the clock since the last mark to phase i (a phase ends at a barrier)
    auto mark = [&](int i) {
        if (PROF && tid == 0) {
            long long c = clock64();
            pt[i] += c - tm;
            tm = c;
        }
    };
    mark(7);
    for (i64 r0 = vs; r0 < end; r0 += KC) {
        const int n = (int)min((i64)KC, end - r0);
        cp_wait_all();
        __syncthreads();  // the chunk before is done with shared memory, this chunk's rows are staged
        mark(6);

        // 1. rows: qn, kn, g, beta (zero past the sequence's end; v stays as staged)
        for (int t = warp; t < KC; t += NW) {
            const bool valid = t < n;
            float qv[CL], kv[CL], sq = 0.0f, sk = 0.0f;
#pragma unroll
            for (int i = 0; i < CL; i++) {
                const int c = lane + 32 * i;
                qv[i] = in_val(sRqI, t * D + c);
                kv[i] = in_val(sRkI, t * D + c);
                sq = __fadd_rn(sq, __fmul_rn(qv[i], qv[i]));
                sk = __fadd_rn(sk, __fmul_rn(kv[i], kv[i]));
            }
            // the gate is lower * sigmoid_ff(rate * (graw + dtBias)): first 1 + e^-x of every channel, whose
            // chains interleave, then the reciprocals (frcp_fast; __frcp_rn for a warp where one fails)
            float y[CL];
#pragma unroll
            for (int i = 0; i < CL; i++) {
                const int c = lane + 32 * i;
                const float gr = rnd(sG[t * D + c], bf); // graw rounded as loaded (cuda/deferred.go)
                y[i] = __fadd_rn(1.0f, expf(-__fmul_rn(rate, __fadd_rn(gr, sDtb[c]))));
            }
            // the norms' reciprocal square roots by frsqrt_fast (common.cuh: __frsqrt_rn's value without its
            // branch; the sums the same in every lane, so ok is too), both sums' butterflies interleaved
            warp_sum2(sq, sk);
            const float nq = __fadd_rn(sq, 1e-6f), nk = __fadd_rn(sk, 1e-6f);
            bool okq, okk;
            float qinv = frsqrt_fast(nq, okq), kinv = frsqrt_fast(nk, okk);
            bool ok = true;
#pragma unroll
            for (int i = 0; i < CL; i++) {
                bool oki;
                y[i] = frcp_fast(y[i], oki);
                ok = ok && oki;
            }
            if (!__all_sync(0xffffffffu, okq && okk)) {  // about 1 in 65,000 sums, and any not a positive normal float
                qinv = __frsqrt_rn(nq);
                kinv = __frsqrt_rn(nk);
            }
            if (!__all_sync(0xffffffffu, ok)) {  // never with K3's bounds: x would be below -87
#pragma unroll
                for (int i = 0; i < CL; i++) {
                    const int c = lane + 32 * i;
                    const float gr = rnd(sG[t * D + c], bf);
                    y[i] = sigmoid_ff(__fmul_rn(rate, __fadd_rn(gr, sDtb[c])));
                }
            }
#pragma unroll
            for (int i = 0; i < CL; i++) {
                const int c = lane + 32 * i;
                sQt[t * LDW + c] = __fmul_rn(__fmul_rn(qv[i], qinv), scale);
                sKt[t * LDW + c] = __fmul_rn(kv[i], kinv);
                sG[t * D + c] = valid ? __fmul_rn(lower, y[i]) : 0.0f;
            }
            if (lane == 0) sBeta[t] = valid ? sigmoid_ff(rnd(sRb[t], bf)) : 0.0f; // braw likewise
        }
        __syncthreads();
        mark(0);

        // 2. per channel: G (ascending rows), the scaled rows, e^G_last (four rows at a time, so that a
        // thread holds few values beside the state). Two threads a channel (NT = 2D): each runs the
        // channel's whole scan (the same adds in the same order, so both hold the same G) and scales half
        // of its rows.
        {
            const int c = tid % D, half = tid / D;  // half is warp-uniform
            float G[KC];
            float acc = 0.0f;
#pragma unroll
            for (int t = 0; t < KC; t++) {
                acc = __fadd_rn(acc, sG[t * D + c]);
                G[t] = acc;
            }
            const float gam = expf(acc);
            if (half == 0) sGam[c] = gam;
#pragma unroll
            for (int m = 0; m < KC / 4; m++) {
                if (m / (KC / 8) != half) continue;
                float kh[4];
                float e[4], ei[4];  // e^G and its reciprocal (e >= e^(16 lower): a normal float, frcp_fast's range)
                bool ok = true;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    bool oki;
                    e[i] = expf(G[4 * m + i]);
                    ei[i] = frcp_fast(e[i], oki);
                    ok = ok && oki;
                }
                if (!__all_sync(0xffffffffu, ok)) {
#pragma unroll
                    for (int i = 0; i < 4; i++) ei[i] = __frcp_rn(e[i]);
                }
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int t = 4 * m + i;
                    const float kn = sKt[t * LDW + c];
                    sQt[t * LDW + c] = __fmul_rn(sQt[t * LDW + c], e[i]);
                    sKt[t * LDW + c] = __fmul_rn(kn, e[i]);
                    sKi[t * LDK + c] = __fmul_rn(kn, ei[i]);
                    kh[i] = __fmul_rn(kn, __fmul_rn(gam, ei[i]));
                }
                *(float4*)(sKhT + c * KDA_LDT + 4 * m) = make_float4(kh[0], kh[1], kh[2], kh[3]);
            }
        }
        __syncthreads();
        mark(1);
        if (r0 + KC < end) stage(r0 + KC, 0);  // sRq, sRk, sG, sRb are free until the next chunk

        // 3. A and P, one (t, s) pair a thread at a time, d ascending in fours
        for (int p = tid; p < KC * KC; p += NT) {
            const int t = p / KC, j = p % KC;
            const float4* kt = (const float4*)(sKt + t * LDW);
            const float4* ki = (const float4*)(sKi + j * LDK);
            const float4* qt = (const float4*)(sQt + t * LDW);
            float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), pp = a;  // a sum per component of d mod 4
#pragma unroll 8
            for (int d4 = 0; d4 < D / 4; d4++) {
                const float4 x = ki[d4], y = kt[d4], z = qt[d4];
                a.x = __fmaf_rn(y.x, x.x, a.x), a.y = __fmaf_rn(y.y, x.y, a.y), a.z = __fmaf_rn(y.z, x.z, a.z), a.w = __fmaf_rn(y.w, x.w, a.w);
                pp.x = __fmaf_rn(z.x, x.x, pp.x), pp.y = __fmaf_rn(z.y, x.y, pp.y), pp.z = __fmaf_rn(z.z, x.z, pp.z),
                pp.w = __fmaf_rn(z.w, x.w, pp.w);
            }
            const float as = __fadd_rn(__fadd_rn(a.x, a.y), __fadd_rn(a.z, a.w));
            const float ps = __fadd_rn(__fadd_rn(pp.x, pp.y), __fadd_rn(pp.z, pp.w));
            sA[t * KDA_LDA + j] = j < t ? __fmul_rn(sBeta[t], as) : 0.0f;
            sP[t * KDA_LDP + j] = j <= t ? ps : 0.0f;
        }
        __syncthreads();
        mark(2);

        // 4. M = (I + A)^-1 diag(beta): column j of the inverse by forward substitution (lane j)
        if (tid < KC) {
            const int j = tid;
            float x[KC];
#pragma unroll
            for (int t = 0; t < KC; t++) {
                float acc = 0.0f;  // row t of A in 16-byte loads, the same address in every lane (a broadcast)
#pragma unroll
                for (int u4 = 0; 4 * u4 < t; u4++) {
                    const float4 a = *(const float4*)(sA + t * KDA_LDA + 4 * u4);
                    const float av[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        if (4 * u4 + i < t) acc = __fmaf_rn(av[i], x[4 * u4 + i], acc);
                }
                x[t] = t < j ? 0.0f : (t == j ? 1.0f : -acc);
            }
            const float bj = sBeta[j];
#pragma unroll
            for (int t = 0; t < KC; t++) sM[t * KDA_LDA + j] = __fmul_rn(x[t], bj);
        } else if (SPLIT == 3 && warp > 0) {
            // meanwhile the other warps split Qt and P, B operands of the first two products, which phase 3
            // wrote or read last: the high parts in place, the low parts over Ki (dead since phase 3) and
            // beside P's row
            constexpr int Q4 = D / 4, P4 = KC / 4;  // 16-byte pieces a row of Qt, of P
            for (int p = tid - 32; p < KC * (Q4 + P4); p += NT - 32) {
                if (p < KC * Q4) {
                    const int t = p / Q4, c = 4 * (p % Q4);
                    st_b4<SPLIT>(sQt + t * LDW + c, sWQlo + (KC + t) * LDW + c, *(const float4*)(sQt + t * LDW + c));
                } else {
                    const int t = (p - KC * Q4) / P4, j = 4 * ((p - KC * Q4) % P4);
                    float* pt = sP + t * KDA_LDP + j;
                    st_b4<SPLIT>(pt, pt + KDA_PLO, *(const float4*)pt);
                }
            }
        }
        __syncthreads();
        mark(3);

        // 5. Wk = M Kt (into sWQ's first rows, split: its low parts over Kt, whose column c only this thread
        // reads, all of it before the first write), Wv = M V (transposed), a column a thread, four rows at a time
        {
            const bool isk = tid < D;
            const int c = isk ? tid : tid - D;
            float x[KC];
#pragma unroll
            for (int r = 0; r < KC; r++) x[r] = isk ? sKt[r * LDW + c] : in_val(sVI, r * D + c);
#pragma unroll
            for (int m = 0; m < KC / 4; m++) {
                float w[4];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int t = 4 * m + i;
                    float acc = 0.0f;  // row t of M in 16-byte loads, one broadcast each
#pragma unroll
                    for (int r4 = 0; 4 * r4 <= t; r4++) {
                        const float4 mv = *(const float4*)(sM + t * KDA_LDA + 4 * r4);
                        const float mr[4] = {mv.x, mv.y, mv.z, mv.w};
#pragma unroll
                        for (int k = 0; k < 4; k++)
                            if (4 * r4 + k <= t) acc = __fmaf_rn(mr[k], x[4 * r4 + k], acc);
                    }
                    w[i] = acc;
                }
                if (isk) {
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        st_b<SPLIT>(sWQ + (4 * m + i) * LDW + c, sWQlo + (4 * m + i) * LDW + c, w[i]);
                } else {
                    *(float4*)(sWvT + c * KDA_LDT + 4 * m) = make_float4(w[0], w[1], w[2], w[3]);
                }
            }
        }
        __syncthreads();
        mark(4);
        if (r0 + KC < end) stage(r0 + KC, 1);  // sV is free until the next chunk

        // 6. X^T = S^T [Wk; Qt]^T: 16 value rows x 32 chunk columns (Wk rows 0-15, Qt rows 16-31)
        // this lane's B operand bases (shared-memory byte addresses): every load below adds a constant, and
        // the low parts of sWQ and sP are a constant further (loWQ, loP bytes)
        const u32 bWQ = smem_u32(sWQ + gid * LDW + 2 * tig), bP = smem_u32(sP + gid * KDA_LDP + 2 * tig);
        const u32 bKh = smem_u32(sKhT + gid * KDA_LDT + 2 * tig);
        constexpr u32 loWQ = 4 * 2 * KC * LDW, loP = 4 * KDA_PLO;  // sWQlo - sWQ, P's row's low parts
        float x[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; nt++) x[nt][0] = x[nt][1] = x[nt][2] = x[nt][3] = 0.0f;
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            const float av[4] = {st[j][0], st[j][2], st[j][1], st[j][3]};
            frag<4, SPLIT> a;
            a.set(av);
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                frag<2, SPLIT> b;
                b.load(bWQ + 4 * (8 * nt * LDW + 8 * j), loWQ);
                mma_split<SPLIT>(x[nt], a, b);
            }
        }
        // U^T = Wv^T - Xk^T, as the A operand of the next two products (k: chunk rows)
        frag<4, SPLIT> ua[2];
#pragma unroll
        for (int kk = 0; kk < 2; kk++) {
            const float2 w0 = *(const float2*)(sWvT + dv0 * KDA_LDT + 8 * kk + 2 * tig);
            const float2 w1 = *(const float2*)(sWvT + (dv0 + 8) * KDA_LDT + 8 * kk + 2 * tig);
            const float u[4] = {__fsub_rn(w0.x, x[kk][0]), __fsub_rn(w1.x, x[kk][2]), __fsub_rn(w0.y, x[kk][1]),
                                __fsub_rn(w1.y, x[kk][3])};
            ua[kk].set(u);
        }
        // O^T = Xq^T + U^T P^T, written rounded
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
#pragma unroll
            for (int kk = 0; kk < 2; kk++) {
                frag<2, SPLIT> b;
                b.load(bP + 4 * (8 * nt * KDA_LDP + 8 * kk), loP);
                mma_split<SPLIT>(x[2 + nt], ua[kk], b);
            }
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int t = 8 * nt + 2 * tig + (e & 1);
                const i64 r = r0 + t;
                if (t < n && r >= first) st_out(out + r * ch + hoff + dv0 + (e & 2) * 4, rnd(x[2 + nt][e], bf));
            }
        }
        // S^T = S^T diag(e^G_last) + U^T Kh, after a whole chunk only (a partial one is run again, whole,
        // by the next slice). Kh is split here, in every warp: stored split, its loads of both parts,
        // hoisted by ptxas, left no fewer instructions and nearly five times the spills (version 9)
        if (n == KC) {
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
                const float g0 = sGam[8 * j + 2 * tig], g1 = sGam[8 * j + 2 * tig + 1];
                st[j][0] = __fmul_rn(st[j][0], g0), st[j][1] = __fmul_rn(st[j][1], g1);
                st[j][2] = __fmul_rn(st[j][2], g0), st[j][3] = __fmul_rn(st[j][3], g1);
#pragma unroll
                for (int kk = 0; kk < 2; kk++) {
                    const float2 kv2 = lds2(bKh + 4 * (8 * j * KDA_LDT + 8 * kk));
                    const float bb[2] = {kv2.x, kv2.y};
                    frag<2, SPLIT> b;
                    b.set(bb);
                    mma_split<SPLIT>(st[j], ua[kk], b);
                }
            }
        }
        mark(5);
    }
    cp_wait_all();  // no copy left in flight (the stage of a chunk past the end is never issued, but an empty sequence's is)
    if (PROF && tid == 0)
        for (int i = 0; i < 8; i++) atomicAdd((unsigned long long*)prof + i, (unsigned long long)pt[i]);
    if (fin != nullptr && s == (int)gridDim.x - 1) {  // the last sequence goes on in the next slice
        float* S1 = fin + hoff * D;
#pragma unroll
        for (int j = 0; j < D / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) S1[(8 * j + 2 * tig + (e & 1)) * D + dv0 + (e & 2) * 4] = st[j][e];
    }
}

// KDA_CHUNK(name, D, SPLIT, blocks) defines the extern "C" kernel name that runs kda_chunk<D, SPLIT> with 2D
// threads a block and __launch_bounds__ for blocks blocks an SM.
#define KDA_CHUNK(name, D, SPLIT, blocks, TI)                                                                      \
    extern "C" __global__ void __launch_bounds__(2 * D, blocks)                                                    \
        name(TI* out, const TI* q, const TI* k, const TI* v, const float* graw, const float* braw,                 \
             const float* aLog, const float* dtBias, const int* starts, int heads, float lower, float scale, int bf, \
             const float* init, float* fin, const TI* pq, const TI* pk, const TI* pv, const float* pg,            \
             const float* pb, int npre) {                                                                          \
        kda_chunk<D, SPLIT, TI>(out, q, k, v, graw, braw, aLog, dtBias, starts, heads, lower, scale, bf, init, fin, \
                                pq, pk, pv, pg, pb, npre);                                                         \
    }
KDA_CHUNK(k_kda_chunk_r128, 128, 3, 2, float)
KDA_CHUNK(k_kda_chunk_r64, 64, 3, 4, float)
// The narrow forms: q, k and v (and their carried rows) as bfloat16 bits, ShortConvSiLU's narrow-only
// outputs (cuda/kda.go), and the output as bfloat16 bits; the same values (widened as staged, rounded
// before stored), so the same bits as the float32 forms.
KDA_CHUNK(k_kda_chunk_r128n, 128, 3, 2, u16)
KDA_CHUNK(k_kda_chunk_r64n, 64, 3, 4, u16)
#ifdef POTATO_DEV_KERNELS
// k_kda_chunk_prof_r128 is k_kda_chunk_r128 with thread 0 of each block adding its clock cycles per phase
// to prof[0..7] (rows, columns, A and P, M, W, products, chunk start barrier, before the loop): timing only,
// compiled for the tests (POTATO_DEV_KERNELS).
extern "C" __global__ void __launch_bounds__(256, 2)
    k_kda_chunk_prof_r128(float* out, const float* q, const float* k, const float* v, const float* graw, const float* braw,
                          const float* aLog, const float* dtBias, const int* starts, int heads, float lower, float scale,
                          int bf, const float* init, float* fin, const float* pq, const float* pk, const float* pv,
                          const float* pg, const float* pb, int npre, long long* prof) {
    kda_chunk<128, 3, float, true>(out, q, k, v, graw, braw, aLog, dtBias, starts, heads, lower, scale, bf, init, fin, pq, pk, pv,
                            pg, pb, npre, prof);
}
#endif
