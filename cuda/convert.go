package cuda

// The conversion passes around a cuBLASLt GEMM: float32 activations to its bfloat16 operand (convert.cu)
// and the rounding of its float32 output (elementwise.cu). Each picks the four-element kernel where the
// shape and alignment allow it; both forms compute every element with the same statement, so the choice
// changes no bit.

// toBF16 writes rows x ld bfloat16 values to out from rows x k float32 values at x (ld >= k; the padding
// columns zero): k_to_bf16_v4 when ld == k, k is a multiple of 4 and the pointers are aligned, else
// k_to_bf16.
func (c *opCtx) toBF16(out, x uint64, rows, k, ld int) error {
	if ld == k && k%4 == 0 && x%16 == 0 && out%8 == 0 {
		n4 := rows * k / 4
		return c.launch1D("k_to_bf16_v4", n4, out, x, int64(n4))
	}
	return c.launch1D("k_to_bf16", ld*rows, out, x, int64(rows), int32(k), int32(ld))
}

// roundF32 writes rnd(x) over n float32 values (out may be x): k_round4 when n is a multiple of 4 and
// both are 16-byte aligned, else k_round.
func (c *opCtx) roundF32(out, x uint64, n int, bf int32) error {
	if n%4 == 0 && out%16 == 0 && x%16 == 0 {
		return c.launch1D("k_round4", n/4, out, x, int64(n/4), bf)
	}
	return c.launch1D("k_round", n, out, x, int64(n), bf)
}
