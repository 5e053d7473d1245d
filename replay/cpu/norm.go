package cpu

import "github.com/potato-k3/potato-k3/replay/ops"

// RMSNorm normalises each group of g = w.Cols() consecutive columns of every row (w is 1 x g and g divides
// x.Cols()). Per group v, in float32:
//
//	v[d] = rounded(x[d])                 // the input rounded as read (ops.Backend.RMSNorm)
//	ms := sum_d float32(v[d]*v[d]) / g   // ascending d
//	inv := float32(1 / sqrt(ms + eps))   // once per group: the reference's x * rsqrt(mean + eps)
//	out[d] = rounded(rounded(v[d] * inv) * w[d])
//
// The rounding between the normalisation and the weight is the reference's cast back to bf16 before the
// weight multiply (K3_SPEC.md section 3).
func (b *Backend) RMSNorm(x, w ops.Tensor, eps float32) (ops.Tensor, error) {
	return b.norm("RMSNorm", x, w, nil, eps)
}

// GatedRMSNorm returns rounded(RMSNorm(x, w, eps)[i] * sigmoid(gate[i])): the same two statements as
// RMSNorm followed by MulSigmoid, in one pass, so it equals the unfused pair bit for bit.
func (b *Backend) GatedRMSNorm(x, w, gate ops.Tensor, eps float32) (ops.Tensor, error) {
	if gate == nil {
		return nil, argErr("GatedRMSNorm", "gate is nil")
	}
	return b.norm("GatedRMSNorm", x, w, gate, eps)
}

// norm is RMSNorm, followed by the sigmoid gate when gate is not nil.
func (b *Backend) norm(op string, x, w, gate ops.Tensor, eps float32) (ops.Tensor, error) {
	began := b.opStart()
	names, args := []string{"x", "w"}, []ops.Tensor{x, w}
	if gate != nil {
		names, args = append(names, "gate"), append(args, gate)
	}
	ts, err := tensors(op, names, args...)
	if err != nil {
		return nil, err
	}
	if err := ops.CheckNorm(op, x, w, gate); err != nil {
		return nil, err
	}
	xt, wt := ts[0], ts[1]
	g := wt.cols
	var gd []float32
	if gate != nil {
		gd = ts[2].data
	}
	out := newTensor(xt.rows, xt.cols)
	groups := xt.rows * (xt.cols / g)
	b.parallelRange(groups, max(1, 4096/g), func(lo, hi int) {
		v := make([]float32, g) // a group of x, rounded as read
		for q := lo; q < hi; q++ {
			o := out.data[q*g : (q+1)*g]
			for d, xd := range xt.data[q*g : (q+1)*g] {
				v[d] = b.r(xd)
			}
			inv := rsqrt32(sumSquares(v)/float32(g) + eps)
			for d, vd := range v {
				o[d] = b.r(b.r(vd*inv) * wt.data[d])
			}
			if gd != nil {
				for d, gv := range gd[q*g : (q+1)*g] {
					o[d] = b.r(o[d] * sigmoid(gv))
				}
			}
		}
	})
	if err := b.interrupted(op, began); err != nil {
		return nil, err
	}
	return out, nil
}

// MulSigmoid returns out[i] = rounded(x[i] * sigmoid(gate[i])), in float32.
func (b *Backend) MulSigmoid(x, gate ops.Tensor) (ops.Tensor, error) {
	began := b.opStart()
	const op = "MulSigmoid"
	ts, err := tensors(op, []string{"x", "gate"}, x, gate)
	if err != nil {
		return nil, err
	}
	xt, gt := ts[0], ts[1]
	if xt.rows != gt.rows || xt.cols != gt.cols {
		return nil, shapeErr(op, "x %v and gate %v differ", xt, gt)
	}
	out := newTensor(xt.rows, xt.cols)
	b.parallelRange(len(out.data), 1<<12, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out.data[i] = b.r(xt.data[i] * sigmoid(gt.data[i]))
		}
	})
	if err := b.interrupted(op, began); err != nil {
		return nil, err
	}
	return out, nil
}
