package ops

// LatentKeys is an optional interface of a Backend whose MLA can expand the heads' keys and values from
// the normalised key latent itself (K3_SPEC.md 5.3: kv = kv_b_proj(c_kv)), so that the forward pass never
// materialises kv (heads x (nope + vdim) values a row, 24,576 in K3) and the backend writes the keys
// where its attention kernel reads them. The model asks MLAFromLatent once a layer and, when it answers
// true, skips kv_b_proj's MatMul and calls MLALatent, or MLASlice with kv nil.
//
// Contract: the answer depends only on the sizes, the precision and the backend's options, never on the
// rows. MLALatent(q, latent, ks, kvb, ...) is MLA(q, kv, ks, ...) with kv = latent times kvb transposed,
// row by row, each element one float32 sum over the latent in a fixed order and rounded as a MatMul's
// output (it need not be this backend's MatMul's order, so the bits may differ from MLA over MatMul's kv
// at float32 rounding level); MLASlice with kv nil expands every key, a carried prefix's too, the same
// way, so the Slicer contract holds for it as it does for MLA.
type LatentKeys interface {
	// MLAFromLatent reports whether MLALatent and MLASlice with kv nil run for these sizes (kvLora: the
	// latent's width).
	MLAFromLatent(heads, nope, shared, vdim, kvLora int) bool
	// MLALatent is MLA with kv given as latent (rows x kvLora) and kvb, the kv_b_proj weight
	// (heads*(nope+vdim) x kvLora).
	MLALatent(q, latent, ks, kvb Tensor, heads, nope, shared, vdim int, l Layout) (Tensor, error)
}
