// common.cuh: helpers shared by every kernel file of package cuda.
//
// Numerics (the ops contract, replay/ops): every activation is float32; in BF16 precision a value is
// rounded to bfloat16 (nearest even) exactly where the contract says "rounded" (rnd below, flag bf).
// Products that the CPU backend rounds to float32 before adding are written __fmul_rn / __fadd_rn, which
// the compiler never fuses into an FMA (the module is also built with --fmad=false). Transcendentals are
// evaluated in double and rounded to float once, as the CPU backend does with package math: within half a
// float ulp of the exact value, so the two backends agree bit for bit but in rare near-ties.
//
// Every kernel that reduces computes each output from a fixed set of threads in a fixed order that does
// not depend on the grid, the number of rows or which block runs it (DESIGN.md, Numerics).
#pragma once

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef long long i64;
typedef unsigned long long u64;

// bf16_round is replay/bf16.Round: round to nearest even; NaN stays NaN, made quiet.
__device__ __forceinline__ float bf16_round(float x) {
    u32 u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return __uint_as_float((u & 0xffff0000u) | 0x00400000u);
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return __uint_as_float(u & 0xffff0000u);
}

// rnd is the contract's "rounded": bfloat16 when bf is set (BF16 precision), the identity in FP32.
__device__ __forceinline__ float rnd(float x, int bf) { return bf ? bf16_round(x) : x; }

// bf16x4_bits packs four bfloat16 values held as float32 (their low halves zero) as their bits, the
// lower index in the low half, exactly: a narrow-only output's store (cuda/narrow.go).
__device__ __forceinline__ uint2 bf16x4_bits(float4 y) {
    return make_uint2((__float_as_uint(y.x) >> 16) | (__float_as_uint(y.y) & 0xffff0000u),
                      (__float_as_uint(y.z) >> 16) | (__float_as_uint(y.w) & 0xffff0000u));
}

// bf16x4_value widens four bfloat16 bit patterns packed as bf16x4_bits packs them, exactly.
__device__ __forceinline__ float4 bf16x4_value(uint2 v) {
    return make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u), __uint_as_float(v.y << 16),
                       __uint_as_float(v.y & 0xffff0000u));
}

// rnd4 is rnd of each of v's four values, for every number: how a kernel loads an input whose rounding a
// MatMul deferred to it (cuda/deferred.go). Rounding is idempotent, so inputs that are rounded already
// keep their bits. It is the hardware conversion (cvt.rn.bf16x2.f32: round to nearest even, subnormals
// kept), one instruction a pair, which gives bf16_round's bits for every number and the canonical NaN
// for a NaN (bf16_round keeps the NaN's sign and top payload bits; a NaN's sign and payload are not part
// of the ops contract). Four bf16_round made the short convolution, which rounds every value of its
// window, 37% slower (run 74: 57.8 ms a kda layer against 42.3); with a select that kept bf16_round's
// NaN, 16% (run 75: 49.2).
__device__ __forceinline__ float4 rnd4(float4 v, int bf) {
    if (!bf) return v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800 // no bfloat16 conversion before sm_80
    return make_float4(bf16_round(v.x), bf16_round(v.y), bf16_round(v.z), bf16_round(v.w));
#else
    u32 p, q;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(p) : "f"(v.y), "f"(v.x));
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(q) : "f"(v.w), "f"(v.z));
    return bf16x4_value(make_uint2(p, q));
#endif
}

// bf16_bits returns the bfloat16 bit pattern of rnd(x) (exact when x is a bfloat16 value).
__device__ __forceinline__ u32 bf16_bits(float x) { return __float_as_uint(bf16_round(x)) >> 16; }

// smem_u32 is the shared-memory address of a pointer into shared memory (what cp.async, ldmatrix and the
// wgmma descriptors take).
__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }

// cp_async16 copies 16 bytes from global src to shared dst (cp.async, L2 only, sm_80 on), or writes 16
// zero bytes when !in (src is then not read).
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, bool in) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(in ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// cp_async_wait waits until at most N of this thread's committed groups are in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// bf16 weights are stored as raw 16-bit patterns; widening is exact.
__device__ __forceinline__ float bf16_to_f32(u16 h) { return __uint_as_float(((u32)h) << 16); }

// Weight storage types, as the Go side passes them (Tensor.dt).
#define DT_F32 0
#define DT_BF16 1

// ld_w reads element i of a weight stored as dt.
__device__ __forceinline__ float ld_w(const void* p, int dt, i64 i) {
    return dt == DT_BF16 ? bf16_to_f32(((const u16*)p)[i]) : ((const float*)p)[i];
}

// Scalar functions, each float(f(double(x))) as in replay/cpu/mathf.go.
__device__ __forceinline__ float sigmoid_f(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }
__device__ __forceinline__ float exp_f(float x) { return (float)exp((double)x); }
__device__ __forceinline__ float tanh_f(float x) { return (float)tanh((double)x); }
__device__ __forceinline__ float rsqrt_f(float x) { return (float)(1.0 / sqrt((double)x)); }
__device__ __forceinline__ float silu_f(float x) { return __fmul_rn(x, sigmoid_f(x)); }

// sigmoid_ff is 1 / (1 + e^-x) in single precision (KDA's fast prep, kda.cu and kda_chunk.cu): expf (CUDA's, at most 2 ulps), one
// rounded add and an IEEE reciprocal (__frcp_rn): within a few ulps of sigmoid_f. For x < -88 expf(-x)
// overflows to infinity and the result is 0 where sigmoid_f gives a denormal below 2^-126.
__device__ __forceinline__ float sigmoid_ff(float x) { return __frcp_rn(__fadd_rn(1.0f, expf(-x))); }

// frcp_fast is __frcp_rn(y) where ok comes back true: the approximate reciprocal and one Newton step in
// fused multiply-adds, the sequence ptxas emits for __frcp_rn's fast path, taken for every y whose
// exponent field is 1 .. 252 (the same test); elsewhere (zero, subnormals, |y| >= 2^126, infinities,
// NaN) ok is false and the value is not the reciprocal. Without __frcp_rn's branch to its slow path,
// several of these in a row interleave; a caller checks ok (once for a warp, __all_sync) and runs
// __frcp_rn where it failed.
__device__ __forceinline__ float frcp_fast(float y, bool& ok) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(y));
    const float e = __fmaf_rn(y, r, -1.0f);
    ok = ((__float_as_uint(y) + 0x1800000u) & 0x7f800000u) > 0x1ffffffu;
    return __fmaf_rn(r, -e, r);
}

// frsqrt_fast is __frsqrt_rn(x) where ok comes back true, for every x whose exponent field is 1 .. 254 and
// sign is clear (a positive normal float) but about 1 in 65,000; elsewhere (zero, subnormals, negatives,
// infinities, NaN) and for those few, ok is false and the value is not the reciprocal square root. It is
// not __frsqrt_rn's own sequence but a certified one: __frsqrt_rn is correctly rounded (the CUDA C++
// Programming Guide's intrinsics table: IEEE-compliant, 0 ulp), so any value proven to be 1/sqrt(x) rounded
// to nearest has its bits. rsqrt.approx's estimate y0 is within E = 2^-22.9 of r = 1/sqrt(x) (relative; the
// PTX ISA's bound over the positive finite floats); one Newton step in double precision,
// y1 = y0 + (y0/2)(1 - (x y0) y0), with x and y0 exact in double, three roundings of 2^-53, leaves
// |y1 - r| <= r (1.5 E^2 + 2^-52) < 2.5e-14 r: fewer than 226 double ulps of y1's binade. Rounding y1 to float
// (cvt.rn) gives r's rounding unless a float midpoint lies between them; r is never one (1/sqrt of a float
// is not a 25-bit dyadic), the midpoints of y1's binade sit where its 29 bits below float precision are
// 2^28, and the other binades' are 2^27 double ulps away or more. So ok requires those 29 bits more than
// 4,096 from 2^28: 18 times the bound (enough for an rsqrt.approx 4 times less accurate than stated;
// TestFrsqrtFast checks it on the CPU with y0 anywhere in that range).
// Without __frsqrt_rn's branch (between its path for zeros, subnormals and non-finite inputs and the
// scaled one for the rest, in CUDA 11.8's SASS) several of these interleave; a caller checks ok (once for
// a warp, __all_sync) and runs __frsqrt_rn where it failed, as for frcp_fast.
__device__ __forceinline__ float frsqrt_fast(float x, bool& ok) {
    float y0;
    asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y0) : "f"(x));
    const double xd = (double)x, yd = (double)y0;
    const double e = __fma_rn(-__dmul_rn(xd, yd), yd, 1.0);  // 1 - x y0^2 = -(2 eps + eps^2), to 2^-53 of x y0^2
    const double y1 = __fma_rn(__dmul_rn(0.5, yd), e, yd);
    const u32 low = (u32)__double2loint(y1) & 0x1fffffffu;  // the 29 mantissa bits below float precision
    ok = (__float_as_uint(x) - 0x00800000u) < 0x7f000000u && low - 0x0ffff000u > 0x2000u;
    return __double2float_rn(y1);
}

// mul_sigmoid_bf4 is rnd(__fmul_rn(x, sigmoid_f(g)), bf) for four pairs, the CPU backend's statement
// (the sigmoid in double precision rounded to float, the product rounded, then to bfloat16 in BF16
// precision; silu is the statement with g = x), with the double-precision sigmoid skipped where single
// precision provably gives the same bits: about 25 single-precision and integer instructions in place
// of about 35 FP64 ones (the FP64 pipe has half the lanes). Used by k_shortconv4, k_mul_sigmoid4 and the
// gated norm; the scalar kernels keep the double-precision statement as the tests' oracles. Run 68 tried
// a form that tested the margin with three bf16_round (about 50 instructions): every bit held and the
// kernels were slower; run 92 measured that form's cost inside KDA's chunked kernel
// (cuda/records/kda_conv_fused.diff).
//
// The fast value y = fl(x * sigmoid_ff(g)): CUDA's expf is within 2 ulps (2^-22 relative; NVIDIA's
// tested bound, the CUDA C++ Programming Guide's table of single-precision functions), 1 + e and the
// reciprocal each add a rounding (2^-24), so sigmoid_ff(g) is within 1.5 * 2^-22 of the true sigmoid and
// within 2^-21 of sigmoid_f(g) (itself within 2^-24 of it); the product's rounding adds 2^-24 to each, so
// the statement's float value lies within |y| * 2^-20 of y: within 16 float32 ulps of y's binade. Where
// y's low 16 bits are more than 32 ulps from 0x8000, the bfloat16 rounding midpoint of its binade, no
// midpoint lies within 32 ulps of y (the nearest one of the binade below is 2^13 of its ulps from a power
// of two), so both values round to the same bfloat16 value, which (no tie) is y's bits plus half a
// bfloat16 ulp, truncated. Else (about 0.1% of the values), and for g outside (-80, 80) (expf(-g) near
// overflow), |y| outside [2^-100, 2^127) (products near the subnormals, 0, infinities) and NaN, the
// double-precision statement runs. FP32 precision (bf 0) always runs it. TestMulSigmoidMargin checks
// the bound on the CPU with expf's error pushed to 2 ulps either way.
//
// mul_sigmoid_fast computes the fast value and says whether it stands (ok); mul_sigmoid_bf4 takes the
// four fast values first and the double-precision statement after them for those that fail, so that the
// four chains interleave (run 94's form, one pair at a time, ended each in its own branch, which kept the
// next one from starting). The fast value's reciprocal is frcp_fast: 1 + e^-g for g in (-80, 80) lies in [1,
// 2^116), where frcp_fast is __frcp_rn (sigmoid_ff's) without the branch to the slow path; ok includes
// frcp_fast's own test, so a value outside its range would take the double-precision statement.
__device__ __forceinline__ float mul_sigmoid_fast(float x, float g, bool& ok) {
    bool rok;
    const float y = __fmul_rn(x, frcp_fast(__fadd_rn(1.0f, expf(-g)), rok));
    const u32 u = __float_as_uint(y);
    // g in (-80, 80) (false for NaN); biased exponent 27 .. 253; low half more than 32 from 0x8000 (0x7fe0
    // .. 0x8020 fall back)
    ok = rok && g > -80.0f && g < 80.0f && ((u >> 23) & 0xffu) - 27u <= 226u && (u & 0xffffu) - 0x7fe0u > 64u;
    return __uint_as_float((u + 0x8000u) & 0xffff0000u);
}

__device__ __forceinline__ float4 mul_sigmoid_bf4(float4 x, float4 g, int bf) {
    if (!bf) // FP32 precision: the statement, unrounded
        return make_float4(__fmul_rn(x.x, sigmoid_f(g.x)), __fmul_rn(x.y, sigmoid_f(g.y)), __fmul_rn(x.z, sigmoid_f(g.z)),
                           __fmul_rn(x.w, sigmoid_f(g.w)));
    bool o0, o1, o2, o3;
    float4 y = make_float4(mul_sigmoid_fast(x.x, g.x, o0), mul_sigmoid_fast(x.y, g.y, o1), mul_sigmoid_fast(x.z, g.z, o2),
                           mul_sigmoid_fast(x.w, g.w, o3));
    if (!(o0 && o1 && o2 && o3)) {
        if (!o0) y.x = rnd(__fmul_rn(x.x, sigmoid_f(g.x)), bf);
        if (!o1) y.y = rnd(__fmul_rn(x.y, sigmoid_f(g.y)), bf);
        if (!o2) y.z = rnd(__fmul_rn(x.z, sigmoid_f(g.z)), bf);
        if (!o3) y.w = rnd(__fmul_rn(x.w, sigmoid_f(g.w)), bf);
    }
    return y;
}

// situ_f is one SiTU-GLU element (K3_SPEC.md 5.4), float32 left to right as replay/cpu situ:
// (beta * tanh(a/beta)) * sigmoid(a) * (linBeta * tanh(b/linBeta)).
// It is situ_gate(a) * situ_lin(b): each factor depends on one input only (experts.cu tabulates them
// over the 65,536 bfloat16 inputs).
__device__ __forceinline__ float situ_gate(float a, float beta) {
    return __fmul_rn(__fmul_rn(beta, tanh_f(__fdiv_rn(a, beta))), sigmoid_f(a));
}
__device__ __forceinline__ float situ_lin(float b, float linBeta) { return __fmul_rn(linBeta, tanh_f(__fdiv_rn(b, linBeta))); }
__device__ __forceinline__ float situ_f(float a, float b, float beta, float linBeta) {
    return __fmul_rn(situ_gate(a, beta), situ_lin(b, linBeta));
}

// warp_sum returns the sum of v over the 32 lanes of a full warp, the same bits in every lane: a fixed
// butterfly (xor 16, 8, 4, 2, 1); each step adds two partial sums, and a + b == b + a exactly, so both
// lanes of a pair hold the same value after every step.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// warp_sum2 is warp_sum of a and of b in place, their butterflies interleaved so that the two chains of
// shuffles and adds overlap: each sum's adds are warp_sum's, in its order, so the bits are the same.
__device__ __forceinline__ void warp_sum2(float& a, float& b) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ta = __shfl_xor_sync(0xffffffffu, a, o), tb = __shfl_xor_sync(0xffffffffu, b, o);
        a = __fadd_rn(a, ta);
        b = __fadd_rn(b, tb);
    }
}

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = __dadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ int warp_sum_i(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// lane_sum_sq returns, in every lane, sum_i v[i]^2 over n floats v[i] = rnd(x[i], bf) (x rounded as it
// is read): lane l adds v[l], v[l+32], ... in ascending order (products rounded first), then warp_sum.
// The order depends on n only.
__device__ __forceinline__ float lane_sum_sq(const float* x, int n, int lane, int bf) {
    float s = 0.0f;
    for (int i = lane; i < n; i += 32) {
        const float v = rnd(x[i], bf);
        s = __fadd_rn(s, __fmul_rn(v, v));
    }
    return warp_sum(s);
}

// MXFP4 (K3_SPEC.md section 4): code c of E2M1 times 2^(scale byte - 127), exact in float32.
__device__ __constant__ float e2m1_values[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                                 -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// e8m0 returns 2^(s-127) as a float (s < 255; 2^-127 is a float32 subnormal, exact).
__device__ __forceinline__ float e8m0(u32 s) {
    return s == 0 ? __uint_as_float(0x00400000u) : __uint_as_float(s << 23);
}
