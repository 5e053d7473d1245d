package cpu

import "github.com/potato-k3/potato-k3/replay/ops"

// SiTUGLU returns out[i] = rounded(situ(gate[i], up[i])) with, in float32 left to right (K3_SPEC.md 5.4),
//
//	situ(a, b) = (beta * tanh(a/beta)) * sigmoid(a) * (linBeta * tanh(b/linBeta))
//
// tanh and sigmoid are evaluated in float64 and rounded to float32. ExpertsAccumulate uses the same
// function, so an expert equals MatMul, MatMul, SiTUGLU, MatMul bit for bit.
func (b *Backend) SiTUGLU(gate, up ops.Tensor, beta, linBeta float32) (ops.Tensor, error) {
	began := b.opStart()
	const op = "SiTUGLU"
	ts, err := tensors(op, []string{"gate", "up"}, gate, up)
	if err != nil {
		return nil, err
	}
	gt, ut := ts[0], ts[1]
	if gt.rows != ut.rows || gt.cols != ut.cols {
		return nil, shapeErr(op, "gate %v and up %v differ", gt, ut)
	}
	if beta == 0 || linBeta == 0 {
		return nil, argErr(op, "beta %g and linBeta %g must be non-zero", beta, linBeta)
	}
	out := newTensor(gt.rows, gt.cols)
	b.parallelRange(len(out.data), 1<<12, func(lo, hi int) {
		b.situRange(out.data[lo:hi], gt.data[lo:hi], ut.data[lo:hi], beta, linBeta)
	})
	if err := b.interrupted("SiTUGLU", began); err != nil {
		return nil, err
	}
	return out, nil
}

// situRange sets out[i] = rounded(situ(gate[i], up[i])).
func (b *Backend) situRange(out, gate, up []float32, beta, linBeta float32) {
	up = up[:len(gate)]
	out = out[:len(gate)]
	for i, a := range gate {
		out[i] = b.r(situ(a, up[i], beta, linBeta))
	}
}
