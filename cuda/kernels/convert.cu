// convert.cu: activations to the bfloat16 operand of the cuBLASLt matmul (cublaslt_plan.go, matmul.go).
//
// Versions:
//   1. k_to_bf16: one thread per element of the n x ld output in a grid-stride loop, 256 threads a block:
//      out[r*ld + c] = the bfloat16 bits of x[r*k + c] rounded to nearest even for c < k, zero in the
//      padding (ld is k rounded up to 8, so every row starts 16-byte aligned for the tensor-core loads).
//      In BF16 precision x holds bfloat16 values and the conversion is exact; it is the rounding
//      matmul_tc.cu applies as it stages x, so both matmuls read the same operand. Each element on its
//      own: the grid changes no bit. Memory-bound (4 bytes read, 2 written an element); when ld == k the
//      index needs no division. Next: 16-byte vector loads and stores.
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
