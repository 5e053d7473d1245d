package ops

// NarrowMatMuler is an optional interface of a Backend: a matmul whose output the backend may keep in a
// narrower storage, for a reader that takes it so. A KDA layer's q, k and v projections (K3_SPEC.md 5.2)
// are read once, by their short convolution; in BF16 precision their values are bfloat16, and the CUDA
// backend then writes them as bfloat16 alone (cuBLASLt rounds in its epilogue) where MatMul writes
// float32 sums for the reader to round: at K3's size half of a [tokens, 12288] tensor's bytes written and
// read again, three times a KDA layer. The model uses it for those projections when the backend
// implements it.
//
// Contract: MatMulNarrow(x, w) returns the values MatMul(x, w) returns, bit for bit, and fails where it
// fails; any op reads its output as it reads any tensor (a backend widens what a reader needs wider).
type NarrowMatMuler interface {
	MatMulNarrow(x, w Tensor) (Tensor, error)
}
