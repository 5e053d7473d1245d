// convert.cu: activations to the bfloat16 operand of the cuBLASLt matmul (cublaslt_plan.go, matmul.go).
//
// Versions:
//   1. k_to_bf16: one thread per element of the n x ld output in a grid-stride loop, 256 threads a block:
//      out[r*ld + c] = the bfloat16 bits of x[r*k + c] rounded to nearest even for c < k, zero in the
//      padding (ld is k rounded up to 8, so every row starts 16-byte aligned for the tensor-core loads).
//      In BF16 precision x holds bfloat16 values and the conversion is exact; it is the rounding
//      matmul_tc.cu applies as it stages x, so both matmuls read the same operand. Each element on its
//      own: the grid changes no bit. Memory-bound (4 bytes read, 2 written an element); when ld == k the
//      index needs no division.
//   2. k_to_bf16_v4 (ld == k, k a multiple of 4, x 16-byte and out 8-byte aligned: every K3 shape): four
//      elements a thread, one 16-byte load and one 8-byte store, the same rounding per element. Version
//      1's 2-byte stores and per-element loop cost about twice the memory time at 16,384 x 7,168 on the
//      H200 (MatMul's conversion and rounding passes were 26% of a 12288 x 7168 MatMul there).
#include "common.cuh"

extern "C" __global__ void k_to_bf16(u16* out, const float* x, i64 rows, int k, int ld) {
    i64 n = rows * ld;
    i64 step = (i64)gridDim.x * blockDim.x;
    if (ld == k) {
        for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += step)
            out[i] = (u16)(__float_as_uint(bf16_round(x[i])) >> 16);
        return;
    }
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += step) {
        i64 r = i / ld;
        int c = (int)(i - r * ld);
        out[i] = c < k ? (u16)(__float_as_uint(bf16_round(x[r * k + c])) >> 16) : (u16)0;
    }
}

// k_to_bf16_v4: k_to_bf16 for ld == k, four elements a thread: out4[i] holds the bfloat16 bits of
// x4[i].x .. .w, low half first (little-endian: out[4i] .. out[4i+3]). n4 = rows * k / 4.
extern "C" __global__ void k_to_bf16_v4(uint2* out, const float4* x, i64 n4) {
    i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n4; i += step) {
        float4 v = x[i];
        u32 a = (__float_as_uint(bf16_round(v.x)) >> 16) | (__float_as_uint(bf16_round(v.y)) & 0xffff0000u);
        u32 b = (__float_as_uint(bf16_round(v.z)) >> 16) | (__float_as_uint(bf16_round(v.w)) & 0xffff0000u);
        out[i] = make_uint2(a, b);
    }
}
