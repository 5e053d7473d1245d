// experts_wg.cu: the grouped expert GEMMs of experts.cu on Hopper's warpgroup MMA (wgmma, sm_90a only),
// with the MXFP4 weights decoded to bfloat16 in shared memory, so that no decoded weight reaches global
// memory. cuda/experts.go launches them on the grouped path's plan (gather, SiTU tables, gate/up, down,
// combine: experts.cu's other kernels); only the two GEMMs change:
//
//	k_experts_gateup_wg    h[i, c] = rnd(situ(rnd(zs[i] . w1_e[c]), rnd(zs[i] . w3_e[c])))   bfloat16
//	k_experts_down_wg      h2[i, c] = rnd(h[i] . w2_e[c])                                    bfloat16
//
// Bits: each output is one float32 accumulator over k in ascending k steps of 16 (one wgmma each), the
// order inside a step the tensor core's. Nothing in a row's sum depends on the other rows of its tile, the
// tile table or the grid, so the path is batch invariant and calls on expert subsets equal one call; the
// sums are not mma.sync's, so the oracle is the grouped kernels within rounding (the decoded values and the
// rounding points are theirs: experts.cuh).
//
// Versions:
//   1. block tile 128 rows x 256 weight rows (gate/up: 128 columns of w1 and the same 128 of w3: a thread's
//      accumulators for gate column c and up column c sit 64 registers apart, so SiTU runs in the epilogue),
//      two warpgroups of 64 rows each, one m64n256k16 wgmma a k step, both operands read by wgmma from
//      shared memory in the 128-byte swizzle (8 rows of 128 bytes a 1,024-byte atom, 16-byte chunk c of
//      row r at chunk c ^ (r % 8)). k panels of 64: four activation stages filled by cp.async two panels
//      ahead, three weight stages: every thread loads one weight row's 64 codes (32 bytes, 2 scales) a
//      panel ahead into registers and decodes it (experts.cuh, exact) into the next stage while the tensor
//      cores run this panel's wgmma (asynchronous: issued, then waited one panel later). One block an SM
//      (164,864 bytes of shared memory). A warpgroup whose 64 rows are past the tile's end skips its wgmma.
#include "common.cuh"
#include "experts.cuh"

#define WBM 128        // rows of a block tile: two warpgroups of 64
#define WBN 256        // weight rows of a block tile (gate/up: 128 of w1 then the same 128 of w3)
#define WBK 64         // k panel: one 128-byte swizzled row of bfloat16 a row
#define WA_STAGES 4    // activation stages: filled two panels ahead, read by wgmma up to a panel behind
#define WB_STAGES 3    // weight stages: decoded one panel ahead, read by wgmma up to a panel behind
#define W_THREADS 256  // two warpgroups
#define WA_BYTES (WBM * WBK * 2)
#define WB_BYTES (WBN * WBK * 2)
// dynamic shared memory: the stages plus 1,024 bytes to align the first to a swizzle atom (164,864 bytes)
#define W_SMEM_BYTES (WA_STAGES * WA_BYTES + WB_STAGES * WB_BYTES + 1024)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// swz returns the byte offset of 16-byte chunk c (0..7) of row r in a tile of 128-byte rows stored in the
// 128-byte swizzle that wgmma's descriptors name (mode 1): the tile starts on a 1,024-byte boundary.
__device__ __forceinline__ u32 swz(int r, int c) { return (u32)(r * 128 + ((c ^ (r & 7)) << 4)); }

// wg_desc is the shared-memory matrix descriptor of a K-major operand at saddr in the 128-byte swizzle:
// start address >> 4 (bits 0-13), leading byte offset 16 (unused by this mode, bits 16-29), stride byte
// offset 1,024 between 8-row atoms (bits 32-45), swizzle mode 1 (bits 62-63). The k step j of a panel
// starts 32 j bytes in: the descriptor plus 2 j.
__device__ __forceinline__ u64 wg_desc(u32 saddr) {
    return (u64)((saddr & 0x3FFFFu) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// fence_async_shared orders this thread's shared-memory writes (st.shared, completed cp.async) before
// later reads by the async proxy (wgmma's operand loads); a barrier then extends it to the block.
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// pin keeps the compiler from moving reads or writes of an accumulator across the asm statements around it
// (the registers belong to an asynchronous wgmma between its issue and its wait).
__device__ __forceinline__ void pin(float& x) { asm volatile("" : "+f"(x)::"memory"); }

// wgmma_m64n256k16: d[64 x 256] += a . b^T over 16 k, a and b bfloat16 in shared memory (descriptors),
// d float32 in the warpgroup's registers: thread (warp w, lane l) holds rows 16 w + l / 4 (+ 8) and
// columns 8 j + 2 (l % 4) (+ 1) as d[4 j + {0, 1, 2, 3}] = (row, col), (row, col + 1), (row + 8, col),
// (row + 8, col + 1).
__device__ __forceinline__ void wgmma_m64n256k16(float* d, u64 da, u64 db) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1, 0, 0;\n"
        "}\n"
        :
          "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(1)
        : "memory");
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// experts_wg is one block tile of a grouped GEMM (experts.cu's experts_gemm on wgmma): out[row0 + r, c]
// for the tile's rows r < rows and the block's columns c, from the bfloat16 rows a[row0 + r, 0:k] and an
// expert's MXFP4 matrices (wp: six device addresses an expert). GATEUP: m = ffn columns of SiTU(w1, w3);
// else m = latent columns of w2. out has m columns (bfloat16). k % 32 == 0, m % 2 == 0.
template <bool GATEUP, int DEC>
__device__ __forceinline__ void experts_wg(u16* out, const u16* a, const int4* tiles, const u64* wp, int ncol,
                                           int m, int k, const float* __restrict__ situ) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) u8 wsm[];
    const u32 As0 = (smem_u32(wsm) + 1023u) & ~1023u, Bs0 = As0 + WA_STAGES * WA_BYTES;
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, wq = (tid >> 5) & 3;
    const int tile = (int)(blockIdx.x / (u32)ncol), ct = (int)(blockIdx.x - (u32)tile * (u32)ncol);
    const int4 tl = tiles[tile];  // expert index, first row, rows
    const int nrows = tl.z;
    const u64* w = wp + 6 * tl.x;
    const int col0 = ct * (GATEUP ? WBN / 2 : WBN);
    const int pw = k >> 1, sw = k >> 5;
    // A warpgroup whose rows are all past the tile's end runs its wgmma on zeros all the same (a wgmma
    // under a branch is serialized by ptxas) and stores nothing.
    const bool active = wg * 64 < nrows;

    // The weight row this thread decodes: row tid of the block's 256 (gate/up: 128 of w1, then w3's).
    const int wrow = GATEUP ? col0 + (tid & 127) : col0 + tid;
    const bool bin = wrow < m;
    const int mat = GATEUP ? (tid < 128 ? 0 : 1) : 2;
    const u8* bpk = (const u8*)w[2 * mat] + (i64)(bin ? wrow : 0) * pw;
    const u8* bsc = (const u8*)w[2 * mat + 1] + (i64)(bin ? wrow : 0) * sw;

    const u16* abase = a + (i64)tl.y * k;
    const int np = (k + WBK - 1) / WBK;

    auto issue_a = [&](int p) {
        const u32 dst = As0 + (u32)(p % WA_STAGES) * WA_BYTES;
        const int p0 = p * WBK;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int c = tid + W_THREADS * j;
            const int r = c >> 3, kc = c & 7;
            const bool in = r < nrows && p0 + kc * 8 < k;
            cp_async16(dst + swz(r, kc), in ? abase + (i64)r * k + p0 + kc * 8 : abase, in);
        }
    };
    uint4 braw[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
    u32 bscale[2] = {127u, 127u};
    auto load_b = [&](int p) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const bool in = bin && p * WBK + 32 * h < k;
            braw[h] = in ? *(const uint4*)(bpk + (i64)p * (WBK / 2) + 16 * h) : make_uint4(0, 0, 0, 0);
            bscale[h] = in ? bsc[(i64)p * (WBK / 32) + h] : 127u;
        }
    };
    auto store_b = [&](int p) {
        const u32 row = Bs0 + (u32)(p % WB_STAGES) * WB_BYTES;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint4 o[4];
            decode32_regs<DEC>(o, braw[h], bscale[h]);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(row + swz(tid, 4 * h + q)),
                             "r"(o[q].x), "r"(o[q].y), "r"(o[q].z), "r"(o[q].w)
                             : "memory");
            }
        }
    };

    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; i++) acc[i] = 0.0f;

    issue_a(0);
    cp_async_commit();
    if (np > 1) issue_a(1);
    cp_async_commit();
    load_b(0);
    store_b(0);
    if (np > 1) load_b(1);
    for (int p = 0; p < np; p++) {
        cp_async_wait<1>();    // this thread's copies of panel p have landed (p + 1's may be in flight)
        fence_async_shared();  // its copies and weight stores, visible to wgmma
        __syncthreads();       // everyone's; and every warpgroup's wgmma of panel p - 2 has completed
        if (p + 2 < np) issue_a(p + 2);  // into the stage panel p - 2 read
        cp_async_commit();
        {  // unconditional, so that no wgmma sits on a divergent path (ptxas serializes them there)
            const u64 da = wg_desc(As0 + (u32)(p % WA_STAGES) * WA_BYTES + (u32)wg * 64 * 128);
            const u64 db = wg_desc(Bs0 + (u32)(p % WB_STAGES) * WB_BYTES);
#pragma unroll
            for (int i = 0; i < 128; i++) pin(acc[i]);
            wg_fence();
#pragma unroll
            for (int j = 0; j < WBK / 16; j++) wgmma_m64n256k16(acc, da + 2 * j, db + 2 * j);
            wg_commit();
        }
        // The next weight panel is decoded into the stage panel p - 2 read while this panel's wgmma run;
        // its raw bytes were loaded a panel ago.
        if (p + 1 < np) {
            store_b(p + 1);
            if (p + 2 < np) load_b(p + 2);
        }
        wg_wait<1>();  // panel p - 1's wgmma are done (this panel's may run on)
    }
    wg_wait<0>();
#pragma unroll
    for (int i = 0; i < 128; i++) pin(acc[i]);
    if (!active) return;

    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int r = wg * 64 + wq * 16 + g + 8 * hf;
        if (r >= nrows) continue;
        u16* orow = out + ((i64)tl.y + r) * m;
        if (GATEUP) {
#pragma unroll
            for (int j = 0; j < 16; j++) {
                const int c = col0 + 8 * j + 2 * t;
                if (c < m) {  // m even, c even: c + 1 < m too
                    const float h0 = situ_tab(situ, acc[4 * j + 2 * hf], acc[4 * (j + 16) + 2 * hf]);
                    const float h1 = situ_tab(situ, acc[4 * j + 2 * hf + 1], acc[4 * (j + 16) + 2 * hf + 1]);
                    *(u32*)(orow + c) = (__float_as_uint(h0) >> 16) | (__float_as_uint(h1) & 0xffff0000u);
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < 32; j++) {
                const int c = col0 + 8 * j + 2 * t;
                if (c < m) {
                    const float h0 = bf16_round(acc[4 * j + 2 * hf]), h1 = bf16_round(acc[4 * j + 2 * hf + 1]);
                    *(u32*)(orow + c) = (__float_as_uint(h0) >> 16) | (__float_as_uint(h1) & 0xffff0000u);
                }
            }
        }
    }
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// Launch (k_experts_gateup_wg, k_experts_down_wg): blockDim 256, W_SMEM_BYTES of dynamic shared memory,
// gridDim tiles * ncol blocks (block b: row tile b / ncol, column tile b % ncol; ncol = ceil(ffn / 128)
// for gate/up, ceil(latent / 256) for down), the tile table of experts.cu's kernels. The _nodec forms skip
// decoding (wrong values: they time the rest of the kernel). Compiled for sm_90a only; elsewhere the
// kernels exist and do nothing, and the Go side never launches them (Backend.wgOK).
#define W_GATEUP(name, dec)                                                                                     \
    extern "C" __global__ void __launch_bounds__(W_THREADS, 1)                                                 \
        name(u16* h, const u16* zs, const int4* tiles, const u64* wp, int ncol, int ffn, int latent,            \
             const float* situ) {                                                                               \
        experts_wg<true, dec>(h, zs, tiles, wp, ncol, ffn, latent, situ);                                       \
    }
#define W_DOWN(name, dec)                                                                                    \
    extern "C" __global__ void __launch_bounds__(W_THREADS, 1)                                              \
        name(u16* h2, const u16* h, const int4* tiles, const u64* wp, int ncol, int latent, int ffn) {       \
        experts_wg<false, dec>(h2, h, tiles, wp, ncol, latent, ffn, nullptr);                                \
    }
W_GATEUP(k_experts_gateup_wg, X_DEC)
W_DOWN(k_experts_down_wg, X_DEC)
W_GATEUP(k_experts_gateup_wg_nodec, DEC_NONE)
W_DOWN(k_experts_down_wg_nodec, DEC_NONE)
