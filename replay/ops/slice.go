package ops

import "fmt"

// SliceLayout places the rows of one slice of a wave: a wave too large for the device runs each layer over
// consecutive slices of its rows, and a slice boundary may fall anywhere inside a sequence. Only the
// slice's first piece can continue a sequence begun in an earlier slice, and only its last can go on into
// the next one. Row-wise ops ignore all this; the three ops that mix tokens (short convolution, KDA, MLA)
// hand the state of the one sequence crossing each boundary from slice to slice as a Carry.
type SliceLayout struct {
	Layout
	// Offset is how many rows of the first piece's sequence were in earlier slices (0: it starts here).
	Offset int
	// Open says that the last piece's sequence goes on in the next slice.
	Open bool
}

// Whole is the slice layout of a wave run in one slice.
func Whole(l Layout) SliceLayout { return SliceLayout{Layout: l} }

// Carry is what a token-mixing op hands from one slice to the next for the sequence that crosses the
// boundary: the short convolution's last kernel-1 inputs, KDA's recurrent state (heads x d x d, float32),
// MLA's normalised key latents and shared keys of every earlier row of the sequence. It belongs to the
// backend that made it; Backend.Free releases it.
type Carry interface {
	// CarryBytes is the memory the carry holds, for the engine's plan.
	CarryBytes() int64
}

// Slicer is an optional interface of a Backend: the token-mixing ops run over a wave slice by slice.
//
// Contract: running a layout's rows as consecutive slices (CutSlices), each call given the carry the
// previous slice's call returned, gives bit for bit the rows the unsliced op gives for the whole layout,
// in both precisions and for every slice size, as ShortConvSiLU, KDA and MLA document them. A call takes
// in == nil exactly when l.Offset == 0 and returns a carry exactly when l.Open; it never frees in (the
// caller frees both with Free) and keeps no reference to its other arguments.
type Slicer interface {
	// ShortConvSiLUSlice is ShortConvSiLU over a slice; the carry holds the last kernel-1 rows of x of the
	// open sequence (fewer when it has fewer).
	ShortConvSiLUSlice(x, w Tensor, l SliceLayout, in Carry) (Tensor, Carry, error)
	// KDASlice is KDA over a slice; the carry holds the open sequence's state S of every head.
	KDASlice(q, k, v, graw, braw Tensor, aLog, dtBias Tensor, heads int, lower float32, l SliceLayout, in Carry) (Tensor, Carry, error)
	// MLASlice is MLA over a slice. latent (rows x kvLora) is the normalised key latent c_kv of every row
	// and kvb the kv_b_proj weight (heads*(nope+vdim) x kvLora), so that kv = MatMul(latent, kvb) row by
	// row: the carry keeps the open sequence's latent and ks rows (kvLora + shared values a row, not the
	// heads' expanded keys and values) and the next slice expands them again with the same MatMul, so its
	// queries attend to every earlier key of their sequence with the same bits. On a LatentKeys backend
	// whose MLAFromLatent answers true kv may be nil: the call then expands every key from the latents.
	MLASlice(q, kv, ks, latent, kvb Tensor, heads, nope, shared, vdim int, l SliceLayout, in Carry) (Tensor, Carry, error)
}

// PrefixSizer is an optional interface of a Slicer: what MLASlice holds beyond its inputs and output for
// a slice that continues a sequence begun prefix rows before, as bytes fixed for the call (the earlier
// keys expanded again, whole or a part at a time) and bytes per row of the slice (the slice's keys joined
// after them, and state kept between parts). The engine plans a backend without it as holding every
// head's keys and values of the whole prefix at once (model.Plan.PrefixValues).
type PrefixSizer interface {
	MLAPrefixBytes(prefix, heads, nope, shared, vdim, kvLora int) (fixed, perRow int64)
}

// CutSlices cuts layout l into consecutive slices of at most n rows (n <= 0: one slice). Each slice's
// layout starts at row 0 of the slice; a sequence longer than the rest of a slice continues in the next.
// Empty sequences are kept in the slice where their position falls, so every sequence of l appears in
// exactly one slice or is split across consecutive ones.
func CutSlices(l Layout, n int) []SliceLayout {
	total := l.Tokens()
	if n <= 0 || total <= n {
		return []SliceLayout{Whole(l)}
	}
	var out []SliceLayout
	for lo := 0; lo < total; lo += n {
		hi := min(lo+n, total)
		sl := SliceLayout{Layout: Layout{Starts: []int{0}}}
		for s := range l.Sequences() {
			a, b := l.Starts[s], l.Starts[s+1]
			empty := a == b && a >= lo && (a < hi || hi == total)
			if !empty && (a >= hi || b <= lo) {
				continue
			}
			if a < lo {
				sl.Offset = lo - a
			}
			if b > hi {
				sl.Open = true
			}
			sl.Starts = append(sl.Starts, min(b, hi)-lo)
		}
		out = append(out, sl)
	}
	return out
}

// SliceBounds returns the wave rows each slice covers: slice j is rows bounds[j] .. bounds[j+1]-1.
func SliceBounds(slices []SliceLayout) []int {
	b := []int{0}
	for _, s := range slices {
		b = append(b, b[len(b)-1]+s.Tokens())
	}
	return b
}

// CheckSliceLayout verifies a slice layout against the rows of an op and the carry it was given.
func CheckSliceLayout(op string, l SliceLayout, rows int, in Carry) error {
	if err := CheckLayout(op, l.Layout, rows); err != nil {
		return err
	}
	switch {
	case l.Offset < 0:
		return argErr(op, "slice offset %d is negative", l.Offset)
	case l.Offset > 0 && l.Sequences() == 0:
		return argErr(op, "slice offset %d with no sequence to continue", l.Offset)
	case l.Open && l.Sequences() == 0:
		return argErr(op, "an open slice with no sequence")
	case (l.Offset > 0) != (in != nil):
		return argErr(op, "slice offset %d with carry %v: a carry comes exactly with a continued sequence", l.Offset, in != nil)
	}
	return nil
}

// String renders a slice layout for messages.
func (l SliceLayout) String() string {
	return fmt.Sprintf("slice %v offset %d open %v", l.Starts, l.Offset, l.Open)
}

// RowJoiner is an optional interface of a Backend: one tensor of several tensors' rows. The engine
// keeps an expert-major layer's expert inputs on the device slice by slice and joins a pool of slices'
// rows for one expert call (replay/model/moe_pool.go); without it they go through host memory.
type RowJoiner interface {
	// JoinRows returns parts' rows one after the other (a copy, no rounding): out has the sum of their
	// rows and their columns, which must all be the same. No part is freed or kept.
	JoinRows(parts []Tensor) (Tensor, error)
}
