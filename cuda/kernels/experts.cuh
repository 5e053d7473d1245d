// experts.cuh: what the grouped expert kernels share (experts.cu on mma.sync, experts_wg.cu on wgmma):
// the exact MXFP4 decoders and SiTU by table (cp.async and the bfloat16 bit helpers are common.cuh's).
// The decoders produce registers (decode32_regs) so that each kernel stores them in its own shared-memory
// layout.
#pragma once
#include "common.cuh"

// fp4x2 decodes the two E2M1 codes of byte v (bits 0-7; the low nibble is the lower k) into a bfloat16
// pair (low half: the low nibble). A code's magnitude bits placed at float32 bits 22-24 and its sign at
// bit 31 are a float32 equal to its E2M1 value times 2^-126 (code 1 is the subnormal 2^-127): times s1 =
// 2^(scale-1) (BIG: s1 = 2^126, then s2 = 2^(scale-127)) it is the value times 2^(scale-127), exact, so
// the same float32 as matmul_tc.cu's e2m1_values[code] * e8m0(scale), whose bfloat16 bits are its top half.
template <bool BIG>
__device__ __forceinline__ u32 fp4x2(u32 v, float s1, float s2) {
    float lo = __fmul_rn(__uint_as_float(((v & 7u) << 22) | ((v & 8u) << 28)), s1);
    float hi = __fmul_rn(__uint_as_float(((v & 0x70u) << 18) | ((v & 0x80u) << 24)), s1);
    if (BIG) {
        lo = __fmul_rn(lo, s2);
        hi = __fmul_rn(hi, s2);
    }
    return __byte_perm(__float_as_uint(lo), __float_as_uint(hi), 0x7632);
}

// decode8_f32 returns the 8 bfloat16 values of the 8 MXFP4 codes of word w (code j in nibble j; scale
// byte s) as 4 pairs (pair e: codes 2e, 2e+1, the lower k in the lower half) with fp4x2: any scale byte
// but 255.
__device__ __forceinline__ uint4 decode8_f32(u32 w, u32 s) {
    const bool big = s > 128u;
    const float s1 = __uint_as_float((big ? 253u : s + 126u) << 23), s2 = __uint_as_float(s << 23);
    u32 h[4];
    if (big) {
#pragma unroll
        for (int e = 0; e < 4; e++) h[e] = fp4x2<true>(w >> (8 * e), s1, s2);
    } else {
#pragma unroll
        for (int e = 0; e < 4; e++) h[e] = fp4x2<false>(w >> (8 * e), s1, s2);
    }
    return make_uint4(h[0], h[1], h[2], h[3]);
}

// The bfloat16 bits of the E2M1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 (0x0000, 0x3f00, 0x3f80, 0x3fc0,
// 0x4000, 0x4040, 0x4080, 0x40c0), split into high and low bytes: two 8-entry tables for PRMT (byte i of
// the pair (X0, X1) is entry i).
#define E2M1_HI0 0x3f3f3f00u
#define E2M1_HI1 0x40404040u
#define E2M1_LO0 0xc0800000u
#define E2M1_LO1 0xc0804000u

// bf16x2_mul returns a * b per bfloat16 half, rounded to nearest even: an fma with -0 as the addend, which
// leaves every product, zeros with their sign included, as it is.
__device__ __forceinline__ u32 bf16x2_mul(u32 a, u32 b) {
    u32 d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
    return d;
}

// decode8_prmt is decode8_f32 in fewer instructions, for scale bytes 2..252 (where every decoded value
// and 2^(s-127) are normal bfloat16s): the magnitudes of 4 codes are looked up at once by PRMT (the
// nibbles of the word are the selectors), the pairs interleaved by PRMT, the sign bits moved into place,
// and each pair multiplied by 2^(s-127) in one bfloat16x2 fma. The products are exact (2 significant bits
// times a power of two, in range), so the bits equal decode8_f32's.
__device__ __forceinline__ uint4 decode8_prmt(u32 w, u32 s) {
    const u32 sc = (s << 7) | (s << 23);  // 2^(s-127) in both halves
    const u32 m0 = w & 0x7777u, m1 = (w >> 16) & 0x7777u;
    const u32 h0 = __byte_perm(E2M1_HI0, E2M1_HI1, m0), l0 = __byte_perm(E2M1_LO0, E2M1_LO1, m0);
    const u32 h1 = __byte_perm(E2M1_HI0, E2M1_HI1, m1), l1 = __byte_perm(E2M1_LO0, E2M1_LO1, m1);
    // pair e: codes 2e (low half) and 2e+1; their signs are bits 8e+3 and 8e+7 of w, wanted at 15 and 31
    u32 p0 = __byte_perm(l0, h0, 0x5140) | ((w << 12) & 0x8000u) | ((w << 24) & 0x80000000u);
    u32 p1 = __byte_perm(l0, h0, 0x7362) | ((w << 4) & 0x8000u) | ((w << 16) & 0x80000000u);
    u32 p2 = __byte_perm(l1, h1, 0x5140) | ((w >> 4) & 0x8000u) | ((w << 8) & 0x80000000u);
    u32 p3 = __byte_perm(l1, h1, 0x7362) | ((w >> 12) & 0x8000u) | (w & 0x80000000u);
    return make_uint4(bf16x2_mul(p0, sc), bf16x2_mul(p1, sc), bf16x2_mul(p2, sc), bf16x2_mul(p3, sc));
}

// Weight decoders (DEC) of the grouped kernels: the production kernels use X_DEC.
#define DEC_F32 0   // decode8_f32 for every scale
#define DEC_PRMT 1  // decode8_prmt, decode8_f32 for scale bytes 0, 1, 253, 254
#define DEC_NONE 2  // no decoding: the raw bytes go to the mma as they are (wrong values; timing only)
#define X_DEC DEC_PRMT

// decode8 returns the 8 values of word w's codes (scale byte s) by decoder DEC.
template <int DEC>
__device__ __forceinline__ uint4 decode8(u32 w, u32 s) {
    if (DEC == DEC_NONE) return make_uint4(w, w, w, w);
    if (DEC == DEC_PRMT && s - 2u <= 250u) return decode8_prmt(w, s);
    return decode8_f32(w, s);
}

// decode32_regs returns in o the 32 values of 32 codes (16 bytes) by decoder DEC (o[q]: codes 8q .. 8q+7).
template <int DEC>
__device__ __forceinline__ void decode32_regs(uint4 (&o)[4], uint4 raw, u32 s) {
    if (DEC == DEC_NONE) {
#pragma unroll
        for (int q = 0; q < 4; q++) o[q] = raw;
        return;
    }
    const u32 words[4] = {raw.x, raw.y, raw.z, raw.w};
    const bool prmt = DEC == DEC_PRMT && s - 2u <= 250u;
#pragma unroll
    for (int q = 0; q < 4; q++) o[q] = prmt ? decode8_prmt(words[q], s) : decode8_f32(words[q], s);
}

// decode32 writes decode32_regs' 32 values to dst (16-byte aligned), in order.
template <int DEC>
__device__ __forceinline__ void decode32(u16* dst, uint4 raw, u32 s) {
    uint4 o[4];
    decode32_regs<DEC>(o, raw, s);
#pragma unroll
    for (int q = 0; q < 4; q++) *(uint4*)(dst + 8 * q) = o[q];
}

// SiTU by table: gate and up are rounded to bfloat16 before SiTU, so situ_f(a, b) = situ_gate(a) *
// situ_lin(b) (common.cuh) takes 65,536 values of each factor; k_experts_situ_tables evaluates them once a
// call with situ_f's own statements (tab[0:65536]: situ_gate of the bfloat16 with those bits, tab[65536:]:
// situ_lin), so a lookup gives the same float32 as evaluating it, NaN and infinities included. This moves
// three double-precision transcendentals an element out of the GEMM's epilogue.
__device__ __forceinline__ float situ_tab(const float* __restrict__ tab, float gate, float up) {
    float g = __ldg(tab + bf16_bits(gate)), l = __ldg(tab + 65536 + bf16_bits(up));
    return bf16_round(__fmul_rn(g, l));
}
