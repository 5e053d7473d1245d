// experts.cu: the routed experts of one ExpertsAccumulate call as grouped GEMMs on the tensor cores, for
// BF16 precision (cuda/experts.go launches them; moe.go's per-expert path stays for FP32 precision,
// Options.NoTensorCores and shapes these kernels do not take, and is their test oracle).
//
// The call's rows are laid out expert by expert (ascending id; each expert's rows ascending), so every
// expert owns a contiguous run of the gathered buffer. A tile table lists every (expert, run of at most
// 128 rows); one launch covers every (row tile, column tile) of every expert of the call:
//
//	k_experts_gather       zs[i, :] = bf16(z[rows[i], :])
//	k_experts_situ_tables  SiTU's two factors over the 65,536 bfloat16 inputs (see situ_tab)
//	k_experts_gateup       h[i, c] = rnd(situ(rnd(zs[i] . w1_e[c]), rnd(zs[i] . w3_e[c])))   stored as bfloat16
//	k_experts_down         h2[i, c] = rnd(h[i] . w2_e[c])                                    stored as bfloat16
//	k_experts_combine      for each acc row r, its (i, weight) in ascending expert id:
//	                       acc[r, :] += float32(weight * h2[i, :])
//
// The dense FFN's fused path (cuda/ffn.go) uses the SiTU tables too: k_situ_glu_bf16 at the end of the file.
//
// Bits: each dot product is matmul_tc.cu's: one float32 accumulator per element, starting at 0, receiving
// the products of k chunks of 16 in ascending order, one mma.sync.m16n8k16 (bf16 x bf16 -> f32) per chunk,
// with the operands in the same fragment registers (ldmatrix loads what matmul_tc.cu's 32-bit loads load;
// the MXFP4 values are decoded exactly, as there). The rounding points are the per-expert path's (gate and
// up rounded, SiTU rounded, the w2 output rounded; bfloat16 storage of a rounded value is exact), and the
// combine adds each expert's float32 product in ascending expert id, as k_scatter_add does expert after
// expert. So the result equals the per-expert path bit for bit, whatever the tiles, grid or other experts
// (batch invariant), and calls on ascending expert subsets equal one call.
//
// Versions:
//   1. block tile 128 rows x 128 weight rows (gate/up: 64 columns of w1 and the same 64 of w3, so one
//      thread holds a gate and its up value and SiTU runs in the epilogue: no SiTU launch and no float32
//      gate/up buffers), k panels of 64, 8 warps each 64 x 32 (4 x 4 mma tiles), two blocks an SM. The
//      activations (bfloat16) reach shared memory by cp.async, three stages; the MXFP4 weights are loaded
//      16 bytes (32 codes) a thread one panel ahead into registers and decoded into a double-buffered
//      bfloat16 panel before the barrier; fragments by ldmatrix (rows padded by 8 halves: conflict-free).
//      Warps skip the mma of 16-row groups past the end of an expert's last tile (an expert of 300 rows
//      costs 19 groups, not 24). Two exact decoders (decode32_f32: shifts and float32 multiplies, any
//      scale; decode32_prmt: PRMT table lookups and one bfloat16x2 fma a pair, scales 2..252) give the
//      same bits; the tests compare and time both, and a form without decoding that bounds its cost
//      (now experts.cuh's decode8_f32 and decode8_prmt, 8 codes a call, shared with experts_wg.cu).
//      H200, K3 sizes, 128 experts x 300 rows: gate/up 151 TFLOP/s, down 174 (without decoding 177 and
//      219; decode32_f32 within 2% of decode32_prmt); SiTU's three double-precision transcendentals in
//      the epilogue cost gate/up about as much as the decoding.
//   2. SiTU by table (situ_tab: the two factors of situ_f tabulated over the bfloat16 inputs
//      once a call, the same float32 values), and the next weight panel decoded after the mma of this one
//      are issued (they drain while it decodes) instead of before the barrier. Same bits as version 1.
//      Needs latent % 32 == 0 and ffn % 32 == 0 (whole scale groups; 16-byte aligned rows).
//      The wgmma form (sm_90a, a new oracle: within rounding of these kernels, bit for bit against itself)
//      is experts_wg.cu; on Hopper without cuBLASLt it takes these kernels' place.
//   3. (experts_lt.go; the kernels at the end of this file) where cuBLASLt pins an algorithm for both of
//      the experts' shapes, the GEMMs run there: a chunk of experts' weights decoded to bfloat16 by one
//      launch (k_experts_decode), then per expert and block of rows one cuBLASLt GEMM of the gathered
//      rows by w1 and w3 together (2 ffn x latent), k_experts_situ_rows, one GEMM by w2 and k_to_bf16 into
//      the gathered buffer; the gather, the SiTU tables and the combine are versions 1-2's. The decode and
//      rounding points are those above, the sums cuBLASLt's pinned order (the same for every row whatever
//      n: batch invariant), so the bits differ from versions 1-2 at float32 rounding level. Versions 1-2
//      reach 150-180 TFLOP/s on mma.sync; cuBLASLt runs K3's shapes at 535-620 (cuda/records/JOURNAL.md, run 6).
//   4. version 3 with bfloat16 GEMM outputs: both GEMMs write bfloat16 (cuBLASLt's epilogue rounds the
//      float32 sums to nearest even, the path's rounding points), the down GEMM straight over the rows'
//      place in the gathered buffer, and k_experts_situ_rows reads the bfloat16 gate/up values: no
//      float32 scratch (at 262,144 tokens about 380 GB of float32 writes and reads a MoE layer, run 34)
//      and no k_to_bf16 pass. The first step of the fused MXFP4 grouped GEMM the op profile asks for
//      (bfloat16 outputs, no passes between the GEMMs); the decode to bfloat16 still precedes them.
//   5. version 4 with the SiTU pass eight columns a thread (k_experts_situ_rows8: 16-byte loads and
//      stores, no 64-bit division an element): 3.1-3.5 TB/s against 1.3 (docs/records/run57), the same
//      bits; the element form stays for widths that are not multiples of 8.
//   6. the gather the same way (k_experts_gather8: eight columns a thread, rows on the grid's y): same
//      values; k_experts_gather stays for widths that are not multiples of 8. The combine four columns a
//      thread (k_experts_combine4, 16-byte accesses of acc): the same sums in the same order. The decode a
//      word a thread (k_experts_decode8: contiguous 512-byte stores a warp): the same values. For a
//      pooled call's 128 experts and 599,177 rows (TestExpertsPhasesTiming): gather 3.42 -> 3.01 ms,
//      combine 3.19 -> 2.74 (run 71), decode 5.24 -> 3.02 (run 73). k_experts_decode stays as
//      TestDecode8's reference; the element forms for widths they do not take.
//   7. the gather from z's bfloat16 copy (k_experts_gather8b) on the cuBLASLt path: the copy is made
//      once for z (narrow.go, a pass of 6 bytes a value) and serves every call of a pooled layer (seven
//      at 262,144 tokens), whose gathers then read 2 bytes a gathered value instead of 4 (run 97).
#include "common.cuh"
#include "experts.cuh"

#define XBM 128  // rows of a block tile
#define XBN 128  // weight rows of a block tile (output columns; gate/up: 64 of w1 then the same 64 of w3)
#define XBK 64   // k panel
#define XLD (XBK + 8)  // shared row length in halves (144 bytes: ldmatrix and the staging stores hit 32 banks)
#define XSTAGES 3      // cp.async stages of the activation panel
#define X_THREADS 256
// dynamic shared memory: XSTAGES activation panels and two weight panels of bfloat16 (92,160 bytes)
#define X_SMEM_BYTES ((XSTAGES * XBM + 2 * XBN) * XLD * 2)


__device__ __forceinline__ void ldsm_x4(u32* r, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

// mma_bf16 is matmul_tc.cu's: c += a b, m16n8k16, bf16 inputs, f32 accumulators. Not volatile: each
// accumulator's chain of mma is ordered by its data dependences, the rest may be scheduled freely.
__device__ __forceinline__ void mma_bf16(float* c, const u32* a, const u32* b) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}


// k_experts_situ_tables fills the 2 x 65,536 float32 SiTU factors for beta and linBeta. Launch: 131,072
// threads (gridDim 512, blockDim 256).
extern "C" __global__ void k_experts_situ_tables(float* tab, float beta, float linBeta) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 2 * 65536) return;
    float x = __uint_as_float((u32)(i & 65535) << 16);
    tab[i] = i < 65536 ? situ_gate(x, beta) : situ_lin(x, linBeta);
}

// experts_gemm is one block tile of a grouped GEMM: out[row0 + r, c] for the tile's rows r < rows and
// the block's columns c, from the bfloat16 rows a[row0 + r, 0:k] and an expert's MXFP4 matrices (wp: six
// device addresses an expert: w1 packed, w1 scales, w3 packed, w3 scales, w2 packed, w2 scales). GATEUP:
// m = ffn columns of SiTU(w1, w3); else m = latent columns of w2. out has m columns (bfloat16).
template <bool GATEUP, int DEC>
__device__ __forceinline__ void experts_gemm(u16* out, const u16* a, const int4* tiles, const u64* wp, int ncol,
                                             int m, int k, const float* __restrict__ situ) {
    extern __shared__ __align__(16) u16 xsm[];
    u16* As = xsm;                        // [XSTAGES][XBM][XLD]
    u16* Bs = xsm + XSTAGES * XBM * XLD;  // [2][XBN][XLD]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 2, wn = warp & 3;  // the warp's 64-row half and 32-column quarter
    const int g = lane >> 2, t = lane & 3;    // mma fragment coordinates
    const int tile = (int)(blockIdx.x / (u32)ncol), ct = (int)(blockIdx.x - (u32)tile * (u32)ncol);
    const int4 tl = tiles[tile];  // expert index, first row, rows
    const int nrows = tl.z;
    const u64* w = wp + 6 * tl.x;
    const int col0 = ct * (GATEUP ? XBN / 2 : XBN);
    const int pw = k >> 1, sw = k >> 5;

    // The weight row this thread stages (two threads a row, 32 codes each of a 64-wide panel).
    const int br = tid >> 1, bh = tid & 1;
    const int wrow = GATEUP ? col0 + (br & 63) : col0 + br;
    const bool bin = wrow < m;
    const int mat = GATEUP ? (br < 64 ? 0 : 1) : 2;
    const u8* bpk = (const u8*)w[2 * mat] + (i64)(bin ? wrow : 0) * pw + 16 * bh;
    const u8* bsc = (const u8*)w[2 * mat + 1] + (i64)(bin ? wrow : 0) * sw + bh;

    const u16* abase = a + (i64)tl.y * k;
    const int np = (k + XBK - 1) / XBK;

    auto issue_a = [&](int p) {
        u16* dst = As + (p % XSTAGES) * XBM * XLD;
        const int p0 = p * XBK;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int c = tid + X_THREADS * j;
            int r = c >> 3, kc = (c & 7) * 8;
            bool in = r < nrows && p0 + kc < k;
            cp_async16(smem_u32(dst + r * XLD + kc), in ? abase + (i64)r * k + p0 + kc : abase, in);
        }
    };
    uint4 braw = make_uint4(0, 0, 0, 0);
    u32 bscale = 127;
    auto load_b = [&](int p) {
        bool in = bin && p * XBK + 32 * bh < k;
        braw = in ? *(const uint4*)(bpk + (i64)p * (XBK / 2)) : make_uint4(0, 0, 0, 0);
        bscale = in ? bsc[(i64)p * (XBK / 32)] : 127u;
    };
    auto store_b = [&](int p) { decode32<DEC>(Bs + ((p & 1) * XBN + br) * XLD + 32 * bh, braw, bscale); };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < XSTAGES - 1; s++) {
        if (s < np) issue_a(s);
        cp_async_commit();
    }
    load_b(0);
    store_b(0);
    if (np > 1) load_b(1);
    for (int p = 0; p < np; p++) {
        cp_async_wait<XSTAGES - 2>();  // this thread's copies of panel p have landed
        __syncthreads();               // everyone's, every weight panel p is decoded, every warp is done with p-1
        if (p + XSTAGES - 1 < np) issue_a(p + XSTAGES - 1);
        cp_async_commit();
        const int kk = min(XBK, k - p * XBK);
        const u16* as = As + (p % XSTAGES) * XBM * XLD;
        const u16* bs = Bs + (p & 1) * XBN * XLD;
#pragma unroll
        for (int ks = 0; ks < XBK; ks += 16) {
            if (ks < kk) {  // k % 32 == 0: a last panel of 32 has two chunks, never a zero chunk
                u32 bf[4][2];
#pragma unroll
                for (int q = 0; q < 2; q++) {
                    int nb = GATEUP ? q * (XBN / 2) + wn * 16 : wn * 32 + q * 16;
                    int n = nb + (lane & 7) + ((lane >> 4) << 3);
                    u32 r[4];
                    ldsm_x4(r, smem_u32(bs + n * XLD + ks + ((lane >> 3) & 1) * 8));
                    bf[2 * q][0] = r[0];
                    bf[2 * q][1] = r[1];
                    bf[2 * q + 1][0] = r[2];
                    bf[2 * q + 1][1] = r[3];
                }
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    if (wm * 64 + i * 16 < nrows) {  // uniform per warp: 16-row groups past the tile's rows are skipped
                        u32 af[4];
                        ldsm_x4(af, smem_u32(as + (wm * 64 + i * 16 + (lane & 15)) * XLD + ks + (lane >> 4) * 8));
#pragma unroll
                        for (int j = 0; j < 4; j++) mma_bf16(acc[i][j], af, bf[j]);
                    }
                }
            }
        }
        // The next weight panel is decoded into the other buffer while this panel's mma drain (its readers,
        // the mma of panel p-1, are past the barrier above); its raw bytes were loaded a panel ago.
        if (p + 1 < np) {
            store_b(p + 1);
            if (p + 2 < np) load_b(p + 2);
        }
    }

    const i64 orow0 = tl.y;
#pragma unroll
    for (int i = 0; i < 4; i++) {
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            int r = wm * 64 + i * 16 + g + hf * 8;
            if (r >= nrows) continue;
            u16* orow = out + (orow0 + r) * m;
            if (GATEUP) {
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    int c = col0 + wn * 16 + j * 8 + 2 * t;
                    if (c < m) {  // m even, c even: c + 1 < m too
                        float h0 = situ_tab(situ, acc[i][j][2 * hf], acc[i][j + 2][2 * hf]);
                        float h1 = situ_tab(situ, acc[i][j][2 * hf + 1], acc[i][j + 2][2 * hf + 1]);
                        *(u32*)(orow + c) = (__float_as_uint(h0) >> 16) | (__float_as_uint(h1) & 0xffff0000u);
                    }
                }
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    int c = col0 + wn * 32 + j * 8 + 2 * t;
                    if (c < m) {
                        float h0 = bf16_round(acc[i][j][2 * hf]), h1 = bf16_round(acc[i][j][2 * hf + 1]);
                        *(u32*)(orow + c) = (__float_as_uint(h0) >> 16) | (__float_as_uint(h1) & 0xffff0000u);
                    }
                }
            }
        }
    }
}

// Launch (k_experts_gateup, k_experts_down): blockDim 256, X_SMEM_BYTES of dynamic shared memory, gridDim
// tiles * ncol blocks (block b: row tile b / ncol, column tile b % ncol; ncol = ceil(ffn / 64) for
// gate/up, ceil(latent / 128) for down). tiles: int4 (expert index into wp, first row, rows <= 128, 0).
// The _f32 forms decode with float32 multiplies only (the same bits; compared and timed by the tests),
// the _nodec forms skip decoding (wrong values: they time the rest of the kernel). Both are instruments of
// the tests, compiled only under POTATO_DEV_KERNELS (kernels.go's dev lists): production carries the
// X_DEC forms alone.
#define X_GATEUP(name, dec)                                                                                      \
    extern "C" __global__ void __launch_bounds__(X_THREADS, 2)                                                  \
        name(u16* h, const u16* zs, const int4* tiles, const u64* wp, int ncol, int ffn, int latent,             \
             const float* situ) {                                                                                \
        experts_gemm<true, dec>(h, zs, tiles, wp, ncol, ffn, latent, situ);                                      \
    }
#define X_DOWN(name, dec)                                                                                     \
    extern "C" __global__ void __launch_bounds__(X_THREADS, 2)                                               \
        name(u16* h2, const u16* h, const int4* tiles, const u64* wp, int ncol, int latent, int ffn) {        \
        experts_gemm<false, dec>(h2, h, tiles, wp, ncol, latent, ffn, nullptr);                               \
    }
X_GATEUP(k_experts_gateup, X_DEC)
X_DOWN(k_experts_down, X_DEC)
#ifdef POTATO_DEV_KERNELS
X_GATEUP(k_experts_gateup_f32, DEC_F32)
X_DOWN(k_experts_down_f32, DEC_F32)
X_GATEUP(k_experts_gateup_nodec, DEC_NONE)
X_DOWN(k_experts_down_nodec, DEC_NONE)
#endif

// k_experts_gather: out[r, :] = bf16(z[rows[r], :]) for r < n (cols % 4 == 0, z 16-byte aligned).
// Grid-stride, 4 values a thread.
extern "C" __global__ void k_experts_gather(u16* out, const float* z, const int* rows, i64 n, int cols) {
    const int c4 = cols >> 2;
    const i64 total = n * c4;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < total; i += (i64)gridDim.x * blockDim.x) {
        i64 r = i / c4;
        int c = (int)(i - r * c4) * 4;
        float4 v = *(const float4*)(z + (i64)rows[r] * cols + c);
        uint2 o;
        o.x = bf16_bits(v.x) | (bf16_bits(v.y) << 16);
        o.y = bf16_bits(v.z) | (bf16_bits(v.w) << 16);
        *(uint2*)(out + r * cols + c) = o;
    }
}

// k_experts_gather8: k_experts_gather with eight columns a thread (cols % 8 == 0, z 16-byte aligned, so
// every row starts aligned): thread j = blockIdx.x * blockDim.x + threadIdx.x takes columns 8j .. 8j+7 of
// gathered rows blockIdx.y, blockIdx.y + gridDim.y, ...: two 16-byte loads and one 16-byte store, no 64-bit
// division (the SiTU pass's change of version 5). The same values as k_experts_gather.
// Launch: blockDim 128, gridDim (ceil(cols / 8 / 128), min(n, 65535)).
extern "C" __global__ void k_experts_gather8(u16* out, const float* z, const int* rows, i64 n, int cols) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (8 * j >= cols) return;
    for (i64 r = blockIdx.y; r < n; r += gridDim.y) {
        const float* src = z + (i64)rows[r] * cols + 8 * j;
        const float4 a = *(const float4*)src, b = *(const float4*)(src + 4);
        uint4 o;
        o.x = bf16_bits(a.x) | (bf16_bits(a.y) << 16);
        o.y = bf16_bits(a.z) | (bf16_bits(a.w) << 16);
        o.z = bf16_bits(b.x) | (bf16_bits(b.y) << 16);
        o.w = bf16_bits(b.z) | (bf16_bits(b.w) << 16);
        *(uint4*)(out + r * cols + 8 * j) = o;
    }
}

// k_experts_gather8b: k_experts_gather8 from z's bfloat16 copy zb (cuda/narrow.go; its values are
// rnd(z), the rounding the float32 forms apply as they load): one 16-byte load and one 16-byte store a
// thread and row, a third less traffic than reading float32 (version 7). The same bits as
// k_experts_gather8 on z. Launch: k_experts_gather8's (cols % 8 == 0, zb 16-byte aligned).
extern "C" __global__ void k_experts_gather8b(u16* out, const u16* zb, const int* rows, i64 n, int cols) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (8 * j >= cols) return;
    for (i64 r = blockIdx.y; r < n; r += gridDim.y) {
        *(uint4*)(out + r * cols + 8 * j) = *(const uint4*)(zb + (i64)rows[r] * cols + 8 * j);
    }
}

// k_experts_combine: block b adds to acc row rowid[b] the entries rowptr[b] .. rowptr[b+1]-1 in order
// (the host lists them by ascending expert id): acc[r, d] += w[e] * h2[pos[e], d], the product rounded
// to float32 first, as k_scatter_add. Each element is one thread's sequential sum; cols is even.
// Launch: gridDim = rows touched, blockDim 256.
extern "C" __global__ void k_experts_combine(float* acc, const u16* h2, const int* rowptr, const int* rowid,
                                             const int* pos, const float* w, int cols) {
    const int b = blockIdx.x;
    const int e0 = rowptr[b], e1 = rowptr[b + 1];
    float* a = acc + (i64)rowid[b] * cols;
    for (int d = 2 * threadIdx.x; d < cols; d += 2 * blockDim.x) {
        float2 v = *(float2*)(a + d);
        for (int e = e0; e < e1; e++) {
            u32 hv = *(const u32*)(h2 + (i64)pos[e] * cols + d);
            float we = w[e];
            v.x = __fadd_rn(v.x, __fmul_rn(we, __uint_as_float(hv << 16)));
            v.y = __fadd_rn(v.y, __fmul_rn(we, __uint_as_float(hv & 0xffff0000u)));
        }
        *(float2*)(a + d) = v;
    }
}

// k_experts_combine4: k_experts_combine with four columns a thread (cols % 4 == 0, acc 16-byte and h2
// 8-byte aligned): one 16-byte load and store of acc and an 8-byte load of each entry's h2 values a
// thread, each element's sum in the same order as there. Launch: gridDim = rows touched, blockDim 128.
extern "C" __global__ void k_experts_combine4(float* acc, const u16* h2, const int* rowptr, const int* rowid,
                                              const int* pos, const float* w, int cols) {
    const int b = blockIdx.x;
    const int e0 = rowptr[b], e1 = rowptr[b + 1];
    float* a = acc + (i64)rowid[b] * cols;
    for (int d = 4 * threadIdx.x; d < cols; d += 4 * blockDim.x) {
        float4 v = *(float4*)(a + d);
        for (int e = e0; e < e1; e++) {
            const uint2 hv = *(const uint2*)(h2 + (i64)pos[e] * cols + d);
            const float we = w[e];
            v.x = __fadd_rn(v.x, __fmul_rn(we, __uint_as_float(hv.x << 16)));
            v.y = __fadd_rn(v.y, __fmul_rn(we, __uint_as_float(hv.x & 0xffff0000u)));
            v.z = __fadd_rn(v.z, __fmul_rn(we, __uint_as_float(hv.y << 16)));
            v.w = __fadd_rn(v.w, __fmul_rn(we, __uint_as_float(hv.y & 0xffff0000u)));
        }
        *(float4*)(a + d) = v;
    }
}

// Version 3 (the cuBLASLt path, experts_lt.go): the two GEMMs of each expert run on cuBLASLt with the
// algorithm pinned per shape (cublaslt_plan.go) over weights decoded to bfloat16 first. These two kernels
// are that path's own; the gather, the SiTU tables and the combine are the ones above.

// k_experts_decode writes the bfloat16 weights of experts list[0 .. gridDim.y) (indices into the pointer
// table wp) to out, expert j in slot j of 3 * ffn * latent values: w1 (ffn x latent), w3 (ffn x latent),
// w2 (latent x ffn), row-major, each value decoded exactly (decode32<X_DEC>, as the GEMM kernels above
// decode). latent % 32 == 0 and ffn % 32 == 0, so each matrix is a dense run of 32-code groups: group g
// is bytes 16g .. 16g+15 of the packed part and byte g of the scales. Launch: blockDim 256, gridDim
// (ceil(3 * ffn * latent / 32 / 256), experts); each thread one group (16 bytes in, 64 out).
extern "C" __global__ void k_experts_decode(u16* out, const u64* wp, const int* list, int ffn, int latent) {
    const i64 per = (i64)ffn * latent / 32;  // groups a matrix
    const i64 g = blockIdx.x * (i64)blockDim.x + threadIdx.x;
    if (g >= 3 * per) return;
    const int mat = (int)(g / per);
    const i64 gi = g - (i64)mat * per;
    const u64* w = wp + 6 * list[blockIdx.y];
    const uint4 raw = *(const uint4*)((const u8*)w[2 * mat] + 16 * gi);
    const u32 s = ((const u8*)w[2 * mat + 1])[gi];
    decode32<X_DEC>(out + (i64)blockIdx.y * 3 * per * 32 + 32 * g, raw, s);
}

// k_experts_decode8: k_experts_decode with a thread a 4-byte word of 8 codes (16 bytes out), the matrix
// on the grid's z: a warp's loads are 128 contiguous bytes and its stores one contiguous 512-byte run,
// where k_experts_decode's threads each wrote 64 bytes at 64-byte strides (2.0 TB/s, run 71). Word i of
// a matrix is codes 8i .. 8i+7 of group i / 4 (whose scale byte it takes), decoded by decode8<X_DEC>,
// which is what decode32<X_DEC> does for each of a group's four words: the same values. ffn * latent % 32
// == 0. Launch: blockDim 256, gridDim (ceil(ffn * latent / 8 / 256), experts, 3).
extern "C" __global__ void k_experts_decode8(u16* out, const u64* wp, const int* list, int ffn, int latent) {
    const i64 words = (i64)ffn * latent / 8;  // words a matrix
    const i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x;
    if (i >= words) return;
    const int mat = blockIdx.z;
    const u64* w = wp + 6 * list[blockIdx.y];
    const u32 raw = ((const u32*)w[2 * mat])[i];
    const u32 s = ((const u8*)w[2 * mat + 1])[i >> 2];
    *(uint4*)(out + ((i64)blockIdx.y * 3 + mat) * words * 8 + 8 * i) = decode8<X_DEC>(raw, s);
}

// k_experts_situ_rows: h[r, c] = situ_tab(gu[r, c], gu[r, ffn + c]) as bfloat16 for r < n, c < ffn: gu
// holds a block of rows of the gate/up GEMM (n x 2 ffn bfloat16, rounded to nearest even by cuBLASLt's
// epilogue: w1's columns, then w3's), so this is k_experts_gateup's epilogue (gate and up rounded, SiTU
// rounded) on its own; the tables are indexed by the bits directly (situ_tab of the widened values).
// Grid-stride, 256 threads a block.
extern "C" __global__ void k_experts_situ_rows(u16* h, const u16* gu, i64 n, int ffn, const float* __restrict__ tab) {
    const i64 total = n * ffn;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < total; i += (i64)gridDim.x * blockDim.x) {
        const i64 r = i / ffn;
        const int c = (int)(i - r * ffn);
        const u16* row = gu + r * 2 * ffn;
        const float g = __ldg(tab + row[c]), l = __ldg(tab + 65536 + row[ffn + c]);
        h[i] = (u16)bf16_bits(__fmul_rn(g, l));
    }
}

// k_experts_situ_rows8: k_experts_situ_rows with eight columns a thread (ffn % 8 == 0, so every row of
// gu and h starts 16-byte aligned): thread j = blockIdx.x * blockDim.x + threadIdx.x takes columns
// 8j .. 8j+7 of rows blockIdx.y, blockIdx.y + gridDim.y, ..., with one 16-byte load of the gate values,
// one of the up values and one 16-byte store (the element form moved 2 bytes a thread and divided a
// 64-bit index per element: 1.36 TB/s, docs/records/run57). Each element is computed as there.
// Launch: blockDim 128, gridDim (ceil(ffn / 8 / 128), min(n, 65535)).
extern "C" __global__ void k_experts_situ_rows8(u16* h, const u16* gu, i64 n, int ffn, const float* __restrict__ tab) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (8 * j >= ffn) return;
    for (i64 r = blockIdx.y; r < n; r += gridDim.y) {
        const u16* row = gu + r * 2 * ffn;
        const uint4 g = *(const uint4*)(row + 8 * j);
        const uint4 u = *(const uint4*)(row + ffn + 8 * j);
        const u32 gw[4] = {g.x, g.y, g.z, g.w}, uw[4] = {u.x, u.y, u.z, u.w};
        u32 ow[4];
#pragma unroll
        for (int q = 0; q < 4; q++) { // the lower half of a word is the lower column
            const float a0 = __ldg(tab + (gw[q] & 0xffffu)), l0 = __ldg(tab + 65536 + (uw[q] & 0xffffu));
            const float a1 = __ldg(tab + (gw[q] >> 16)), l1 = __ldg(tab + 65536 + (uw[q] >> 16));
            ow[q] = bf16_bits(__fmul_rn(a0, l0)) | (bf16_bits(__fmul_rn(a1, l1)) << 16);
        }
        *(uint4*)(h + r * ffn + 8 * j) = make_uint4(ow[0], ow[1], ow[2], ow[3]);
    }
}

// k_situ_glu_bf16 (the dense SiTU-GLU FFN, cuda/ffn.go): h[i] = situ_tab(gate[i], up[i]) as bfloat16 for
// i < n, where gate and up are float32 outputs of the gate and up GEMMs (unrounded: the lookups round them
// to bfloat16, as MatMul's k_round does before k_situ) and h is the bfloat16 operand of the down GEMM.
// The tables are k_experts_situ_tables', so each value is rnd(situ_f(rnd(gate), rnd(up))): the bits of
// MatMul, MatMul, SiTUGLU, and the k_to_bf16 the down MatMul would apply to them (exact). Each element on
// its own: the grid changes no bit. Memory-bound: 8 bytes read and 2 written an element, four elements a
// thread (16-byte loads, one 8-byte store; n % 4 == 0 and 16-byte aligned buffers, which ffn.go ensures),
// grid-stride, 256 threads a block. It replaces two k_round passes over the float32 outputs, k_situ (three
// double-precision transcendentals an element) and the down GEMM's k_to_bf16.
extern "C" __global__ void k_situ_glu_bf16(u16* h, const float* gate, const float* up, i64 n, const float* __restrict__ tab) {
    const i64 quads = n / 4;
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 q = blockIdx.x * (i64)blockDim.x + threadIdx.x; q < quads; q += step) {
        const float4 g = __ldcs((const float4*)gate + q), u = __ldcs((const float4*)up + q);
        uint2 v;
        v.x = bf16_bits(situ_tab(tab, g.x, u.x)) | (bf16_bits(situ_tab(tab, g.y, u.y)) << 16);
        v.y = bf16_bits(situ_tab(tab, g.z, u.z)) | (bf16_bits(situ_tab(tab, g.w, u.w)) << 16);
        ((uint2*)h)[q] = v;
    }
    for (i64 i = 4 * quads + blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += step) {  // n % 4 tail
        h[i] = (u16)bf16_bits(situ_tab(tab, gate[i], up[i]));
    }
}
