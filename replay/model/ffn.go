package model

import (
	"github.com/potato-k3/potato-k3/replay/ops"
)

// DenseWeights are a SiTU-GLU FFN (K3_SPEC.md 5.4): layer 0's dense FFN, and the fused shared experts of
// every MoE layer.
type DenseWeights struct {
	Gate ops.Tensor // gate_proj: [width, hidden] bf16; SiTU's first argument
	Up   ops.Tensor // up_proj: [width, hidden] bf16; SiTU's second argument
	Down ops.Tensor // down_proj: [hidden, width] bf16
}

func bindDense(get func(string) ops.Tensor) *DenseWeights {
	return &DenseWeights{
		Gate: get("mlp.gate_proj.weight"), Up: get("mlp.up_proj.weight"), Down: get("mlp.down_proj.weight"),
	}
}

// Outputs is Forward's output alone (FFN).
func (w *DenseWeights) Outputs(f *Pass, x ops.Tensor) (ops.Tensor, ops.Tensor, error) {
	y, err := w.Forward(f, x)
	return y, nil, err
}

// Forward computes down(SiTU(gate x, up x)). SiTU, not SwiGLU: SiLU here silently breaks the model. A
// backend that implements ops.SiTUFFN runs it in one call, with the same bits as the steps below.
func (w *DenseWeights) Forward(f *Pass, x ops.Tensor) (ops.Tensor, error) {
	// x: [tokens, hidden] bf16 -> y: [tokens, hidden] bf16
	b := f.Model.Ops
	beta, linBeta := f.Model.situBetas()
	r := newRun(b)
	defer r.free()
	if fb, ok := b.(ops.SiTUFFN); ok {
		y := r.result("gate_proj, up_proj, SiTU, down_proj", func() (ops.Tensor, error) {
			return fb.SiTUFFN(x, w.Gate, w.Up, w.Down, beta, linBeta)
		})
		return y, r.err
	}
	gate, up := r.mm(x, w.Gate, "gate_proj"), r.mm(x, w.Up, "up_proj")
	act := r.do("SiTU", func() (ops.Tensor, error) { return b.SiTUGLU(gate, up, beta, linBeta) })
	y := r.result("down_proj", func() (ops.Tensor, error) { return b.MatMul(act, w.Down) })
	return y, r.err
}

// situBetas are activation_situ_beta (4) and activation_situ_linear_beta (25).
func (m *Model) situBetas() (beta, linBeta float32) {
	return float32(m.Plan.Config.SiTUBeta), float32(m.Plan.Config.SiTULinearBeta)
}
