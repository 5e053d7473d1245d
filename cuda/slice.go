package cuda

import (
	"fmt"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Token slices (ops.Slicer): a wave too large for the device runs each layer slice by slice, and the
// token-mixing ops hand the state of the sequence that crosses a slice boundary to the next slice. Each
// carried computation is the unsliced kernel's, so a sliced wave has the unsliced wave's bits:
//
//   - ShortConvSiLU runs the whole slice as unsliced (a continued sequence's first kernel-1 rows then see
//     zeros where its earlier inputs were), and recomputes those first rows from the carried inputs: at
//     most 2(kernel-1) rows, against a copy of the slice's x.
//   - KDA's recurrence kernels take the state sequence 0 starts from and write the last sequence's state
//     after its last row (kda.cu: init, fin); the state is what the next row of the unsliced kernel sees.
//     The chunked kernel (kda_chunk.cu) hands on the state at the last sequence's last chunk start and
//     the rows since (fewer than a chunk, kdaPreRows), and the next slice runs that chunk again whole.
//   - MLA expands the continued sequence's carried key latents with the same MatMul that made its kv rows
//     (rows are independent), puts them and the carried shared keys before the slice's keys, and runs the
//     unsliced kernels on query tiles from the one holding the slice's first row: tiles and key blocks
//     stay anchored at the sequence start, so every row meets the same blocks in the same order. The
//     prefix is expanded whole: memory grows with the sequence's length (the plan counts it).

// carry is the CUDA backend's ops.Carry.
type carry struct {
	op string
	// conv: the last inputs [rows x ch]; KDA: the state [heads*d x d], with the chunked kernel then the
	// rows since its chunk start (q, k, v, graw, braw; none when whole chunks); MLA: latent, ks
	t     []*Tensor
	freed bool
}

// CarryBytes is the device memory the carry holds: float32 values, and the bfloat16 copies of the
// narrow-only rows KDA's chunked kernel carries (narrow.go).
func (c *carry) CarryBytes() int64 {
	var n int64
	for _, t := range c.t {
		n += 4 * int64(t.n())
		if t.narrow != 0 {
			n += 2 * int64(t.narrowLd) * int64(t.rows)
		}
	}
	return n
}

// takeCarry checks that in is nil or a live carry that op made on this backend.
func (b *Backend) takeCarry(op string, in ops.Carry) (*carry, error) {
	if in == nil {
		return nil, nil
	}
	c, ok := in.(*carry)
	switch {
	case !ok || c == nil:
		return nil, argErr(op, "carry is a %T, not a cuda carry", in)
	case c.freed:
		return nil, fmt.Errorf("%w: %s: carry", ErrFreed, op)
	case c.op != op:
		return nil, argErr(op, "carry made by %s", c.op)
	}
	for _, t := range c.t {
		if t.b != b || t.freed {
			return nil, argErr(op, "carry of another backend, or freed")
		}
	}
	return c, nil
}

// rowRange is rows lo .. hi-1 of a float32 tensor.
type rowRange struct {
	t      *Tensor
	lo, hi int
}

// catRows returns a new float32 tensor of the given row ranges one after the other (cols columns each),
// by device-to-device copies on the stream. Where every part is narrow-only (narrow.go: ShortConvSiLU's
// outputs, the chunked KDA kernel's carried rows), so is the result, copied from the bfloat16 copies: half
// the bytes, and no part widened (a whole slice's worth of values) for a few rows.
func (b *Backend) catRows(op string, cols int, parts ...rowRange) (*Tensor, error) {
	rows := 0
	narrow := true
	for _, p := range parts {
		if p.t.cols != cols || p.t.dt != dtF32 || p.lo < 0 || p.hi > p.t.rows || p.lo > p.hi {
			return nil, shapeErr(op, "rows %d..%d of %v into %d columns", p.lo, p.hi, p.t, cols)
		}
		rows += p.hi - p.lo
		narrow = narrow && narrowInput(p.t)
	}
	var out *Tensor
	err := b.run(op, func(c *opCtx) error {
		var err error
		if out, err = c.out(rows, cols); err != nil || out.n() == 0 {
			return err
		}
		if narrow {
			err := c.keepNarrow(out, cols, func(nb uint64) error {
				at := nb
				for _, p := range parts {
					n := uint64(2 * (p.hi - p.lo) * cols)
					if err := c.copyDtoD(at, p.t.narrow+uint64(2*p.lo*cols), n); err != nil {
						return err
					}
					at += n
				}
				return nil
			})
			out.narrowOnly = err == nil
			return err
		}
		at := out.ptr
		for _, p := range parts {
			out.unrounded = out.unrounded || p.t.unrounded // a copy keeps a deferred rounding (deferred.go)
			n := uint64(4 * (p.hi - p.lo) * cols)
			if n > 0 {
				if err := c.widen(p.t); err != nil { // a narrow-only tensor's values (narrow.go)
					return err
				}
				if err := c.copyDtoD(at, p.t.ptr+uint64(4*p.lo*cols), n); err != nil {
					return err
				}
			}
			at += n
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// copyDtoD copies n bytes from src to dst on the op's stream (none for n = 0).
func (c *opCtx) copyDtoD(dst, src, n uint64) error {
	if n == 0 {
		return nil
	}
	d := c.b.drv
	return d.Check("cuMemcpyDtoDAsync", bind.Call(d.CuMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), c.stream()))
}

// JoinRows implements ops.RowJoiner: the parts' rows one after the other, by device-to-device copies on
// the compute stream.
func (b *Backend) JoinRows(parts []ops.Tensor) (ops.Tensor, error) {
	const op = "JoinRows"
	if len(parts) == 0 {
		return nil, argErr(op, "no parts")
	}
	rs := make([]rowRange, len(parts))
	for i, x := range parts {
		t, err := b.tensor(op, fmt.Sprintf("parts[%d]", i), x)
		if err != nil {
			return nil, err
		}
		rs[i] = rowRange{t: t, lo: 0, hi: t.rows}
	}
	out, err := b.catRows(op, rs[0].t.cols, rs...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// copyRows copies rows of src over rows from dstRow on of dst (same columns), on the stream: its one
// caller writes into ShortConvSiLU's new output. A narrow-only dst (narrow.go) takes a narrow-only src's
// bfloat16 rows into its copy; otherwise dst must have no bfloat16 copy to go stale (a narrow-only dst
// is widened and its copy dropped first).
func (b *Backend) copyRows(op string, dst *Tensor, dstRow int, src rowRange) error {
	n := src.hi - src.lo
	if n == 0 {
		return nil
	}
	if src.t.cols != dst.cols || dstRow+n > dst.rows {
		return shapeErr(op, "rows %d..%d of %v over row %d of %v", src.lo, src.hi, src.t, dstRow, dst)
	}
	return b.run(op, func(c *opCtx) error {
		cols := dst.cols
		if narrowInput(dst, src.t) {
			return c.copyDtoD(dst.narrow+uint64(2*dstRow*cols), src.t.narrow+uint64(2*src.lo*cols), uint64(2*n*cols))
		}
		if err := c.widen(dst); err != nil {
			return err
		}
		if err := b.dropNarrow(dst); err != nil {
			return err
		}
		if err := c.widen(src.t); err != nil { // a narrow-only tensor's values (narrow.go)
			return err
		}
		dst.unrounded = dst.unrounded || src.t.unrounded // a copy keeps a deferred rounding (deferred.go)
		return c.copyDtoD(dst.ptr+uint64(4*dstRow*cols), src.t.ptr+uint64(4*src.lo*cols), uint64(4*n*cols))
	})
}

// ShortConvSiLUSlice is ShortConvSiLU over one slice of a wave (ops.Slicer).
func (b *Backend) ShortConvSiLUSlice(x, w ops.Tensor, l ops.SliceLayout, in ops.Carry) (ops.Tensor, ops.Carry, error) {
	const op = "ShortConvSiLU"
	c, err := b.takeCarry(op, in)
	if err != nil {
		return nil, nil, err
	}
	ts, err := b.tensors(op, []string{"x", "w"}, x, w)
	if err != nil {
		return nil, nil, err
	}
	xt, wt := ts[0], ts[1]
	if err := ops.CheckSliceLayout(op, l, xt.rows, in); err != nil {
		return nil, nil, err
	}
	if xt.dt != dtF32 {
		return nil, nil, argErr(op, "x %v is a weight, not an activation", xt)
	}
	out, err := b.ShortConvSiLU(x, w, l.Layout)
	if err != nil {
		return nil, nil, err
	}
	keep := wt.cols - 1 // the inputs a row's window reaches back
	ot := out.(*Tensor)
	fail := func(err error) (ops.Tensor, ops.Carry, error) {
		b.Free(ot)
		return nil, nil, err
	}
	if c != nil && keep > 0 && l.Starts[1] > 0 {
		// the continued piece's first rows again, with the carried inputs before them
		m := min(keep, l.Starts[1])
		pre := c.t[0]
		small, err := b.catRows(op, xt.cols, rowRange{pre, 0, pre.rows}, rowRange{xt, 0, m})
		if err != nil {
			return fail(err)
		}
		so, err := b.ShortConvSiLU(small, w, ops.Layout{Starts: []int{0, small.rows}})
		b.Free(small)
		if err != nil {
			return fail(err)
		}
		err = b.copyRows(op, ot, 0, rowRange{so.(*Tensor), pre.rows, pre.rows + m})
		b.Free(so)
		if err != nil {
			return fail(err)
		}
	}
	if !l.Open {
		return ot, nil, nil
	}
	// the open sequence's last inputs: from this slice, and from the carry when its piece is short
	s := l.Sequences() - 1
	lo, hi := l.Starts[s], l.Starts[s+1]
	parts := []rowRange{{xt, max(lo, hi-keep), hi}}
	if n := hi - lo; n < keep && s == 0 && c != nil {
		pre := c.t[0]
		parts = []rowRange{{pre, max(0, pre.rows-(keep-n)), pre.rows}, parts[0]}
	}
	next, err := b.catRows(op, xt.cols, parts...)
	if err != nil {
		return fail(err)
	}
	return ot, &carry{op: op, t: []*Tensor{next}}, nil
}

// KDASlice is KDA over one slice of a wave (ops.Slicer): the recurrence starts sequence 0 from the carried
// state and hands the last sequence's state on.
func (b *Backend) KDASlice(q, k, v, graw, braw ops.Tensor, aLog, dtBias ops.Tensor, heads int, lower float32, l ops.SliceLayout, in ops.Carry) (ops.Tensor, ops.Carry, error) {
	const op = "KDA"
	c, err := b.takeCarry(op, in)
	if err != nil {
		return nil, nil, err
	}
	if err := ops.CheckSliceLayout(op, l, q.Rows(), in); err != nil {
		return nil, nil, err
	}
	var init *Tensor
	var pre []*Tensor
	if c != nil {
		init, pre = c.t[0], c.t[1:]
	}
	out, last, err := b.kda(q, k, v, graw, braw, aLog, dtBias, heads, lower, l.Layout, init, pre, l.Open)
	if err != nil {
		return nil, nil, err
	}
	if !l.Open {
		return out, nil, nil
	}
	next := &carry{op: op, t: []*Tensor{last}}
	if heads > 0 && b.kdaChunkKernel(q.Cols(), q.Cols()/heads, lower) != "" {
		rows, err := b.kdaPreRows(op, l, pre, q, k, v, graw, braw)
		if err != nil {
			b.Free(out)
			b.Free(last)
			return nil, nil, err
		}
		next.t = append(next.t, rows...)
	}
	return out, next, nil
}

// kdaPreRows returns the rows the chunked KDA kernel carries after slice l: the last sequence's rows since
// its last chunk start (the chunk grid anchored at its start, pre rows before row 0 when it is the
// continued sequence 0), taken from pre (q, k, v, graw, braw of the carried rows) and the slice's inputs;
// none when the sequence's rows so far fill whole chunks.
func (b *Backend) kdaPreRows(op string, l ops.SliceLayout, pre []*Tensor, xs ...ops.Tensor) ([]*Tensor, error) {
	ts, err := b.tensors(op, []string{"q", "k", "v", "graw", "braw"}, xs...)
	if err != nil {
		return nil, err
	}
	s := l.Sequences() - 1
	first, end := l.Starts[s], l.Starts[s+1]
	npre := 0
	if s == 0 && len(pre) > 0 {
		npre = pre[0].rows
	}
	vs := first - npre // the sequence's start, in the slice's rows
	keep := (end - vs) % kdaChunkRows
	if keep == 0 {
		return nil, nil
	}
	lo := end - keep
	var out []*Tensor
	for i, x := range ts {
		var parts []rowRange
		if lo < first {
			parts = append(parts, rowRange{pre[i], lo - vs, npre})
		}
		parts = append(parts, rowRange{x, max(lo, first), end})
		r, err := b.catRows(op, x.cols, parts...)
		if err != nil {
			for _, t := range out {
				b.Free(t)
			}
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// MLASlice is MLA over one slice of a wave (ops.Slicer).
func (b *Backend) MLASlice(q, kv, ks, latent, kvb ops.Tensor, heads, nope, shared, vdim int, l ops.SliceLayout, in ops.Carry) (ops.Tensor, ops.Carry, error) {
	const op = "MLA"
	c, err := b.takeCarry(op, in)
	if err != nil {
		return nil, nil, err
	}
	fromLatent := kv == nil // ops.LatentKeys: the keys come from the latents
	if fromLatent {
		kv = latent // the kernels' keys are the latents then (expand below)
	}
	ts, err := b.tensors(op, []string{"q", "kv", "ks", "latent", "kvb"}, q, kv, ks, latent, kvb)
	if err != nil {
		return nil, nil, err
	}
	qt, kvt, kst, lt, wt := ts[0], ts[1], ts[2], ts[3], ts[4]
	if fromLatent {
		if err := ops.CheckMLALatent(q, latent, ks, kvb, heads, nope, shared, vdim, l.Layout); err != nil {
			return nil, nil, err
		}
		if err := b.latentReady(lt, wt, heads, nope, shared, vdim); err != nil {
			return nil, nil, err
		}
	} else if err := ops.CheckMLA(q, kv, ks, heads, nope, shared, vdim, l.Layout); err != nil {
		return nil, nil, err
	}
	if err := ops.CheckSliceLayout(op, l, qt.rows, in); err != nil {
		return nil, nil, err
	}
	if lt.rows != qt.rows || wt.cols != lt.cols || wt.rows != heads*(nope+vdim) || lt.dt != dtF32 || kst.dt != dtF32 || kvt.dt != dtF32 {
		return nil, nil, shapeErr(op, "latent %v with kv_b %v: want %d activation rows and kv_b %d x latent", lt, wt, qt.rows, heads*(nope+vdim))
	}
	var expand *Tensor // kv_b when the kernels expand the keys from the latents (kvt is lt then), else nil
	if fromLatent {
		expand = wt
	}
	var out ops.Tensor
	if c == nil { // the unsliced op, its arguments checked above
		if out, err = b.mla([]*Tensor{qt, kvt, kst}, heads, nope, shared, vdim, l.Layout, 0, nil, expand); err != nil {
			return nil, nil, err
		}
	} else {
		pl, pk := c.t[0], c.t[1]
		if pl.rows != l.Offset || pl.cols != lt.cols || pk.rows != l.Offset || pk.cols != shared {
			return nil, nil, shapeErr(op, "carry of %d rows for a slice at offset %d", pl.rows, l.Offset)
		}
		el := ops.Layout{Starts: make([]int, len(l.Starts))}
		for i, s := range l.Starts {
			el.Starts[i] = s + l.Offset
		}
		el.Starts[0] = 0
		if out, err = b.mlaCarried(qt, kvt, kst, pl, pk, wt, expand, heads, nope, shared, vdim, el, l.Offset); err != nil {
			return nil, nil, err
		}
	}
	if !l.Open {
		return out, nil, nil
	}
	s := l.Sequences() - 1
	lo, hi := l.Starts[s], l.Starts[s+1]
	lp, kp := []rowRange{{lt, lo, hi}}, []rowRange{{kst, lo, hi}}
	if c != nil && s == 0 {
		lp = append([]rowRange{{c.t[0], 0, c.t[0].rows}}, lp...)
		kp = append([]rowRange{{c.t[1], 0, c.t[1].rows}}, kp...)
	}
	nl, err := b.catRows(op, lt.cols, lp...)
	if err != nil {
		b.Free(out)
		return nil, nil, err
	}
	nk, err := b.catRows(op, shared, kp...)
	if err != nil {
		b.Free(out)
		b.Free(nl)
		return nil, nil, err
	}
	return out, &carry{op: op, t: []*Tensor{nl, nk}}, nil
}

var _ ops.Slicer = (*Backend)(nil)
