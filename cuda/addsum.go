package cuda

import "github.com/potato-k3/potato-k3/replay/ops"

var _ ops.SumAdder = (*Backend)(nil)

// AddSum implements ops.SumAdder: Add(p, Add(a, b)) in one pass (elementwise.cu k_add_sum4, four elements
// a thread where the size and the buffers allow, else k_add_sum: the same bits), so the middle sum is
// never written out. Like Add, the kernels round every input as they load it (a MatMul's deferred
// rounding, deferred.go): an MoE layer's routed output comes from its up projection and its shared output
// from the fused FFN, both left unrounded.
func (b *Backend) AddSum(p, a, bt ops.Tensor) (ops.Tensor, error) {
	const op = "AddSum"
	ts, err := b.tensors(op, []string{"p", "a", "b"}, p, a, bt)
	if err != nil {
		return nil, err
	}
	for i, name := range []string{"a", "b"} {
		if t := ts[i+1]; t.rows != ts[0].rows || t.cols != ts[0].cols {
			return nil, shapeErr(op, "p %v and %s %v differ", ts[0], name, t)
		}
	}
	var out *Tensor
	err = b.run(op, func(c *opCtx) error {
		ps, err := c.rawAll(ts)
		if err != nil {
			return err
		}
		n := ts[0].n()
		if out, err = c.out(ts[0].rows, ts[0].cols); err != nil {
			return err
		}
		if n%4 == 0 && aligned16(out.ptr, ps[0], ps[1], ps[2]) {
			return c.launch1D("k_add_sum4", n/4, out.ptr, ps[0], ps[1], ps[2], int64(n/4), b.bf)
		}
		return c.launch1D("k_add_sum", n, out.ptr, ps[0], ps[1], ps[2], int64(n), b.bf)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
