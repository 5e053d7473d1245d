package ops

// SiTUFFN is an optional interface of a Backend: a whole SiTU-GLU FFN (K3_SPEC.md 5.4) in one call, which a
// device backend runs without the float32 intermediates of the unfused ops (the CUDA backend: x converted
// once, SiTU by table straight into the bfloat16 operand of the down GEMM). The model uses it when the
// backend implements it.
//
// Contract: SiTUFFN(x, gate, up, down, beta, linBeta) equals, bit for bit, and fails where it fails,
//
//	MatMul(SiTUGLU(MatMul(x, gate), MatMul(x, up), beta, linBeta), down)
//
// on the same backend, in both precisions: x is rows x hidden, gate and up are width x hidden, down is
// hidden x width, the result rows x hidden. Rows are independent, so it is batch invariant whenever those
// ops are; it keeps no reference to its arguments.
type SiTUFFN interface {
	SiTUFFN(x, gate, up, down Tensor, beta, linBeta float32) (Tensor, error)
}

// SiTUFFNScratch is an optional interface of a Backend with SiTUFFN whose calls hold a bounded scratch
// beyond x and their output, whatever the rows (the CUDA backend runs the FFN in row blocks of at most
// 1 GiB of gate and up outputs). A planner counts that fixed scratch instead of the gate, up and SiTU
// outputs of every row of a slice: for K3's dense FFN 3 x 33,792 values a row, the largest of any layer.
type SiTUFFNScratch interface {
	// SiTUFFNScratchBytes is the most device memory a SiTUFFN call takes beyond x (rows x hidden) and its
	// output, for any number of rows, with bfloat16 weights of width ffn; ok false where a call may hold
	// the three ffn-wide intermediates of every row (a path that runs the unfused ops).
	SiTUFFNScratchBytes(hidden, ffn int) (bytes int64, ok bool)
}
