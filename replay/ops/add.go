package ops

// SumAdder is an optional interface of a Backend: two tensors added and their sum added to a third, in
// one op. An MoE layer ends with its routed experts' output added to its shared experts' output, and that
// sum added to the running sum at once (K3_SPEC.md 5.1 and 5.5); as two Adds the middle sum is written out
// and read back, at K3's width a [tokens, 7168] tensor each way. The model uses it when the backend
// implements it.
//
// Contract: AddSum(p, a, b) returns, bit for bit, Add(p, Add(a, b)) of the same backend (in BF16
// precision rounded(p + rounded(a + b)) element by element); it fails where they fail and keeps no
// reference to its arguments.
type SumAdder interface {
	AddSum(p, a, b Tensor) (Tensor, error)
}
