package model

import (
	"github.com/potato-k3/potato-k3/replay/ops"
)

// mlaEps is the epsilon of MLA's two latent norms (q_a_layernorm, kv_a_layernorm), fixed by the reference
// code rather than read from rms_norm_eps (K3_SPEC.md 5.3).
const mlaEps = 1e-6

// MLAWeights are a gated MLA layer's attention weights (K3_SPEC.md 5.3). In K3: 96 heads, nope 128,
// shared key slot 64, value 128, q latent 1536, kv latent 512.
type MLAWeights struct {
	QA     ops.Tensor // q_a_proj: [q latent, hidden] bf16
	QANorm ops.Tensor // q_a_layernorm: [1, q latent] bf16
	QB     ops.Tensor // q_b_proj: [heads x (nope + shared), q latent] bf16
	KVA    ops.Tensor // kv_a_proj_with_mqa: [kv latent + shared, hidden] bf16
	KVNorm ops.Tensor // kv_a_layernorm: [1, kv latent] bf16
	KVB    ops.Tensor // kv_b_proj: [heads x (nope + value), kv latent] bf16
	G      ops.Tensor // g_proj: [heads x value, hidden] bf16, the output gate before its sigmoid
	O      ops.Tensor // o_proj: [hidden, heads x value] bf16
}

func bindMLA(get func(string) ops.Tensor) *MLAWeights {
	a := "self_attn."
	return &MLAWeights{
		QA: get(a + "q_a_proj.weight"), QANorm: get(a + "q_a_layernorm.weight"), QB: get(a + "q_b_proj.weight"),
		KVA: get(a + "kv_a_proj_with_mqa.weight"), KVNorm: get(a + "kv_a_layernorm.weight"),
		KVB: get(a + "kv_b_proj.weight"), G: get(a + "g_proj.weight"), O: get(a + "o_proj.weight"),
	}
}

// Forward computes gated MLA for the wave; x is the normed layer input.
func (w *MLAWeights) Forward(f *Pass, x ops.Tensor) (ops.Tensor, error) {
	// x: [tokens, hidden] bf16 -> y: [tokens, hidden] bf16
	d, b := f.Model.Dims, f.Model.Ops
	r := newRun(b)
	defer r.free()
	norm := func(x, w ops.Tensor, name string) ops.Tensor {
		return r.do(name, func() (ops.Tensor, error) { return b.RMSNorm(x, w, mlaEps) })
	}
	// Intermediates are freed as soon as the next step has read them, to keep the slice's peak low.
	qa := r.mm(x, w.QA, "q_a_proj")
	cq := norm(qa, w.QANorm, "q_a_layernorm")
	r.drop(qa)
	q := r.mm(cq, w.QB, "q_b_proj") // per head [q_nope | q_s]
	r.drop(cq)
	kv := r.mm(x, w.KVA, "kv_a_proj_with_mqa")
	latent := r.do("kv latent", func() (ops.Tensor, error) { return b.Slice(kv, 0, d.KVLora) })
	ks := r.do("shared key", func() (ops.Tensor, error) { return b.Slice(kv, d.KVLora, d.KVLora+d.QKShared) })
	r.drop(kv)
	cKV := norm(latent, w.KVNorm, "kv_a_layernorm")
	r.drop(latent)
	var kvb ops.Tensor // per head [k_nope | v]; nil where the backend expands it from cKV (ops.LatentKeys)
	if lk, ok := b.(ops.LatentKeys); !ok || !lk.MLAFromLatent(d.MLAHeads, d.QKNope, d.QKShared, d.VHead, d.KVLora) {
		kvb = r.mm(cKV, w.KVB, "kv_b_proj")
	}
	// sliced, the attention carries cKV and ks (kv latent + shared values a row), not the expanded kvb
	o := r.do("attention", func() (ops.Tensor, error) { return f.mla(q, kvb, ks, cKV, w.KVB) })
	r.drop(q, kvb, ks, cKV)
	g := r.mm(x, w.G, "g_proj")
	og := r.do("output gate", func() (ops.Tensor, error) { return b.MulSigmoid(o, g) })
	r.drop(o, g)
	o = og
	y := r.result("o_proj", func() (ops.Tensor, error) { return b.MatMul(o, w.O) })
	return y, r.err
}
