package ops

// KDAConv is an optional interface of a Backend: a KDA layer's three short convolutions and its delta rule
// (K3_SPEC.md 5.2) in one call, which a device backend runs without writing the convolved q and k out and
// reading them back (the CUDA backend convolves them while it normalises them). The model uses it when the
// backend implements it.
//
// Contract: KDAConv(q, k, v, qConv, kConv, vConv, graw, braw, aLog, dtBias, heads, lower, l) equals, bit
// for bit, and fails where it fails,
//
//	KDA(ShortConvSiLU(q, qConv, l), ShortConvSiLU(k, kConv, l), ShortConvSiLU(v, vConv, l),
//	    graw, braw, aLog, dtBias, heads, lower, l)
//
// on the same backend, in both precisions: q, k and v are the projections before their convolutions
// (rows x heads*d), the conv weights ch x K taps. Sequences are independent, so it is batch invariant
// whenever those ops are; it keeps no reference to its arguments.
type KDAConv interface {
	KDAConv(q, k, v, qConv, kConv, vConv, graw, braw, aLog, dtBias Tensor, heads int, lower float32, l Layout) (Tensor, error)
}
