package model

import (
	"github.com/potato-k3/potato-k3/replay/ops"
)

// KDAWeights are a KDA layer's attention weights (K3_SPEC.md 5.2). C = heads x head dim (12288 in K3).
type KDAWeights struct {
	Q, K, V, G          ops.Tensor // q_proj, k_proj, v_proj, g_proj: [C, hidden] bf16
	QConv, KConv, VConv ops.Tensor // q_conv1d, k_conv1d, v_conv1d: [C, kernel] f32 (stored [C, 1, kernel])
	FA                  ops.Tensor // f_a_proj: [head dim, hidden] bf16, the decay gate's first factor
	FB                  ops.Tensor // f_b_proj: [C, head dim] bf16
	B                   ops.Tensor // b_proj: [heads, hidden] bf16, the write strength beta before its sigmoid
	ALog                ops.Tensor // A_log: [1, head dim] f32, padded: the first `heads` entries are used
	DtBias              ops.Tensor // dt_bias: [1, C] f32
	ONorm               ops.Tensor // o_norm: [1, head dim] f32, shared by all heads
	O                   ops.Tensor // o_proj: [hidden, C] bf16
}

func bindKDA(get func(string) ops.Tensor) *KDAWeights {
	a := "self_attn."
	return &KDAWeights{
		Q: get(a + "q_proj.weight"), K: get(a + "k_proj.weight"), V: get(a + "v_proj.weight"),
		G:     get(a + "g_proj.weight"),
		QConv: get(a + "q_conv1d.weight"), KConv: get(a + "k_conv1d.weight"), VConv: get(a + "v_conv1d.weight"),
		FA: get(a + "f_a_proj.weight"), FB: get(a + "f_b_proj.weight"), B: get(a + "b_proj.weight"),
		ALog: get(a + "A_log"), DtBias: get(a + "dt_bias"), ONorm: get(a + "o_norm.weight"),
		O: get(a + "o_proj.weight"),
	}
}

// Forward computes KDA for the wave; x is the normed layer input.
func (w *KDAWeights) Forward(f *Pass, x ops.Tensor) (ops.Tensor, error) {
	// x: [tokens, hidden] bf16 -> y: [tokens, hidden] bf16
	m, b := f.Model, f.Model.Ops
	heads := m.Dims.KDAHeads
	// the gate is lower*sigmoid(...), in (lower, 0): the lower bound scales the activation, it is not a clamp
	lower := float32(m.Plan.Config.LinearAttn.GateLowerBound)
	r := newRun(b)
	defer r.free()
	// each convolution carries its own last inputs from slice to slice
	conv := func(x, w ops.Tensor, name string, c *ops.Carry) ops.Tensor {
		return r.do(name, func() (ops.Tensor, error) { return f.shortConv(x, w, c) })
	}
	// Each projection is freed once convolved, and the delta rule's inputs once it ran: at most the
	// four inputs of the delta rule and its output are alive at once, not every intermediate.
	proj := func(w, cw ops.Tensor, name string, c *ops.Carry) ops.Tensor {
		p := r.mmNarrow(x, w, name+"_proj") // read by the convolution alone (ops.NarrowMatMuler)
		out := conv(p, cw, name+"_conv1d", c)
		r.drop(p)
		return out
	}
	q := proj(w.Q, w.QConv, "q", &f.carries.conv[0])
	k := proj(w.K, w.KConv, "k", &f.carries.conv[1])
	v := proj(w.V, w.VConv, "v", &f.carries.conv[2])
	fa := r.mm(x, w.FA, "f_a_proj")
	graw := r.mm(fa, w.FB, "f_b_proj") // the decay gate before its activation
	r.drop(fa)
	braw := r.mm(x, w.B, "b_proj")
	o := r.do("delta rule", func() (ops.Tensor, error) {
		return f.kda(q, k, v, graw, braw, w.ALog, w.DtBias, heads, lower)
	})
	r.drop(q, k, v, graw, braw)
	gout := r.mm(x, w.G, "g_proj") // the output gate before its sigmoid
	// per head: RMSNorm with the shared o_norm weight, then times sigmoid of the output gate
	on := r.do("o_norm", func() (ops.Tensor, error) { return b.GatedRMSNorm(o, w.ONorm, gout, m.eps) })
	r.drop(o, gout)
	o = on
	y := r.result("o_proj", func() (ops.Tensor, error) { return b.MatMul(o, w.O) })
	return y, r.err
}
