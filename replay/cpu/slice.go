package cpu

import (
	"fmt"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// carry is the CPU backend's ops.Carry: the state of the one sequence that crosses a slice boundary.
type carry struct {
	op    string    // the op that made it: a carry is only taken back by the same op
	rows  int       // conv: rows of x kept; MLA: rows of the sequence so far
	x     []float32 // conv: rows x channels, the last inputs of the sequence, in order
	state []float32 // KDA: heads x d x d
	// MLA: the sequence's normalised key latents (rows x kvLora) and shared keys (rows x shared)
	latent, ks []float32
	freed      bool
}

// CarryBytes is the memory the carry holds.
func (c *carry) CarryBytes() int64 {
	return 4 * int64(len(c.x)+len(c.state)+len(c.latent)+len(c.ks))
}

// takeCarry checks that in is nil or a live carry this op made.
func takeCarry(op string, in ops.Carry) (*carry, error) {
	if in == nil {
		return nil, nil
	}
	c, ok := in.(*carry)
	switch {
	case !ok || c == nil:
		return nil, argErr(op, "carry is a %T, not a cpu carry", in)
	case c.freed:
		return nil, fmt.Errorf("%w: %s: carry", ErrFreed, op)
	case c.op != op:
		return nil, argErr(op, "carry made by %s", c.op)
	}
	return c, nil
}

// withPrefix returns x with pre (rows of x's width) put before its first row, and the layout shifted to
// match: sequence 0 then starts at the prefix's first row.
func withPrefix(x *Tensor, pre []float32, l ops.Layout) (*Tensor, ops.Layout) {
	n := len(pre) / max(x.cols, 1)
	if n == 0 {
		return x, l
	}
	ext := &Tensor{rows: x.rows + n, cols: x.cols, data: make([]float32, 0, len(pre)+len(x.data))}
	ext.data = append(append(ext.data, pre...), x.data...)
	starts := make([]int, len(l.Starts))
	for i, s := range l.Starts {
		starts[i] = s + n
	}
	starts[0] = 0
	return ext, ops.Layout{Starts: starts}
}

// lastRows returns (a copy of) the last n rows of sequence s of layout l over x, n at most its length.
func lastRows(x *Tensor, l ops.Layout, s, n int) ([]float32, int) {
	lo, hi := l.Starts[s], l.Starts[s+1]
	n = min(n, hi-lo)
	return append([]float32(nil), x.data[(hi-n)*x.cols:hi*x.cols]...), n
}

// ShortConvSiLUSlice is ShortConvSiLU over one slice of a wave (ops.Slicer): the carried rows go before
// the slice's first row, the convolution runs as unsliced, and their outputs are dropped. Every output row
// sees the same inputs in the same order as in the whole wave, so the bits are the same.
func (b *Backend) ShortConvSiLUSlice(x, w ops.Tensor, l ops.SliceLayout, in ops.Carry) (ops.Tensor, ops.Carry, error) {
	const op = "ShortConvSiLU"
	c, err := takeCarry(op, in)
	if err != nil {
		return nil, nil, err
	}
	if err := ops.CheckSliceLayout(op, l, x.Rows(), in); err != nil {
		return nil, nil, err
	}
	xt, err := tensor(op, "x", x)
	if err != nil {
		return nil, nil, err
	}
	var pre []float32
	if c != nil {
		if len(c.x) != c.rows*xt.cols {
			return nil, nil, shapeErr(op, "carry of %d values for %d rows of %d channels", len(c.x), c.rows, xt.cols)
		}
		pre = c.x
	}
	ext, el := withPrefix(xt, pre, l.Layout)
	full, err := b.ShortConvSiLU(ext, w, el)
	if err != nil {
		return nil, nil, err
	}
	ft := full.(*Tensor)
	n := ext.rows - xt.rows
	out := &Tensor{rows: xt.rows, cols: ft.cols, data: ft.data[n*ft.cols:]}
	if !l.Open {
		return out, nil, nil
	}
	kk := w.Cols()
	keep, rows := lastRows(ext, el, el.Sequences()-1, kk-1)
	return out, &carry{op: op, rows: rows, x: keep}, nil
}

// KDASlice is KDA over one slice of a wave (ops.Slicer): the first sequence starts from the carried state
// and the last one's final state is carried on. The recurrence is the same step loop, so the bits are.
func (b *Backend) KDASlice(q, k, v, graw, braw ops.Tensor, aLog, dtBias ops.Tensor, heads int, lower float32, l ops.SliceLayout, in ops.Carry) (ops.Tensor, ops.Carry, error) {
	began := b.opStart()
	const op = "KDA"
	c, err := takeCarry(op, in)
	if err != nil {
		return nil, nil, err
	}
	ts, err := tensors(op, []string{"q", "k", "v", "graw", "braw", "aLog", "dtBias"}, q, k, v, graw, braw, aLog, dtBias)
	if err != nil {
		return nil, nil, err
	}
	if err := ops.CheckKDA(q, k, v, graw, braw, aLog, dtBias, heads, l.Layout); err != nil {
		return nil, nil, err
	}
	if err := ops.CheckSliceLayout(op, l, q.Rows(), in); err != nil {
		return nil, nil, err
	}
	d := q.Cols() / heads
	var init []float32
	if c != nil {
		if len(c.state) != heads*d*d {
			return nil, nil, shapeErr(op, "carried state of %d values for %d heads of %d", len(c.state), heads, d)
		}
		init = c.state
	}
	out, last := b.kda(ts[0], ts[1], ts[2], ts[3], ts[4], ts[5], ts[6], heads, lower, l.Layout, init, l.Open)
	if err := b.interrupted(op, began); err != nil {
		return nil, nil, err
	}
	if !l.Open {
		return out, nil, nil
	}
	return out, &carry{op: op, state: last}, nil
}

// MLASlice is MLA over one slice of a wave (ops.Slicer). The first sequence's earlier rows come from the
// carry as latents, expanded by the same MatMul that made their kv rows in their own slice (rows are
// independent), and put before the slice's keys; the queries of the slice then attend exactly as in the
// whole wave. The prefix is expanded one head at a time (mlaPrefix), so a long sequence does not hold
// every head's keys of all its rows.
func (b *Backend) MLASlice(q, kv, ks, latent, kvb ops.Tensor, heads, nope, shared, vdim int, l ops.SliceLayout, in ops.Carry) (ops.Tensor, ops.Carry, error) {
	began := b.opStart()
	const op = "MLA"
	c, err := takeCarry(op, in)
	if err != nil {
		return nil, nil, err
	}
	ts, err := tensors(op, []string{"q", "kv", "ks", "latent", "kvb"}, q, kv, ks, latent, kvb)
	if err != nil {
		return nil, nil, err
	}
	qt, kvt, kst, lt, wt := ts[0], ts[1], ts[2], ts[3], ts[4]
	if err := ops.CheckMLA(q, kv, ks, heads, nope, shared, vdim, l.Layout); err != nil {
		return nil, nil, err
	}
	if err := ops.CheckSliceLayout(op, l, q.Rows(), in); err != nil {
		return nil, nil, err
	}
	if lt.rows != qt.rows || wt.cols != lt.cols || wt.rows != kvt.cols {
		return nil, nil, shapeErr(op, "latent %v with kv_b %v: want %d rows and kv_b %d x latent", lt, wt, qt.rows, kvt.cols)
	}
	first := 0
	if c != nil {
		if c.rows != l.Offset || len(c.latent) != c.rows*lt.cols || len(c.ks) != c.rows*shared {
			return nil, nil, shapeErr(op, "carry of %d rows for a slice at offset %d", c.rows, l.Offset)
		}
		first = 1 // answered by mlaPrefix below
	}
	out := b.mla(qt, kvt, kst, heads, nope, shared, vdim, l.Layout, first)
	if c != nil {
		b.mlaPrefix(out, qt, kvt, kst, wt, c, heads, nope, shared, vdim, l.Starts[1])
	}
	if err := b.interrupted(op, began); err != nil {
		return nil, nil, err
	}
	if !l.Open {
		return out, nil, nil
	}
	s := l.Sequences() - 1
	lo, hi := l.Starts[s], l.Starts[s+1]
	next := &carry{op: op, rows: hi - lo}
	if c != nil && s == 0 {
		next.rows += c.rows
		next.latent, next.ks = append(next.latent, c.latent...), append(next.ks, c.ks...)
	}
	next.latent = append(next.latent, lt.data[lo*lt.cols:hi*lt.cols]...)
	next.ks = append(next.ks, kst.data[lo*shared:hi*shared]...)
	return out, next, nil
}
