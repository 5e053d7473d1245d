package opstest

import (
	"fmt"
	"math"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// sliceTests check ops.Slicer: the token-mixing ops run over a wave slice by slice, carrying the state of
// the sequence that crosses each boundary, give the unsliced op's bits for every slice size. Skipped for a
// backend without the interface.
var sliceTests = []test{{"Slices", testSlices}}

// sliceLens are the wave the slice checks cut: uneven sequences, one shorter than the convolution's
// kernel, one past a KDA chunk of 64, one long enough that small slices cross it many times.
var sliceLens = []int{1, 2, 5, 64, 65, 130}

// sliceSizes hit every residue of the short convolution's kernel (4) and of a 64-row chunk in at least
// one boundary, single rows, and slices longer than some sequences; 0 is the whole wave as one slice
// (ops.Whole through the sliced op).
var sliceSizes = []int{0, 1, 2, 3, 4, 5, 7, 63, 64, 65, 100, 266}

// slicedOp runs one token-mixing op on the rows lo..hi-1 of the wave's inputs, for a slice layout (or, with
// whole, the unsliced op over the whole wave).
type slicedOp struct {
	name string
	cols []int // widths of the row inputs
	// run: rows are the inputs for the slice's rows; returns the output and the carry.
	run func(rows []ops.Tensor, l ops.SliceLayout, in ops.Carry, whole bool) (ops.Tensor, ops.Carry, error)
}

func testSlices(s *suite) {
	sl, ok := s.b.(ops.Slicer)
	if !ok {
		s.Skipf("backend %s has no ops.Slicer", s.b.Name())
	}
	// small widths, then the head sizes a device backend has kernels of its own for (K3's KDA heads of
	// 128, also 64 and 32; K3's MLA heads of 128 + 64 and values of 128)
	for _, sh := range []sliceShape{{32, 2, 2, 8, 4, 8, 12}, {256, 2, 2, 128, 64, 128, 32}, {128, 2, 1, 16, 8, 12, 16}, {64, 2, 1, 16, 8, 12, 16}} {
		for _, op := range s.slicedOps(sl, sh) {
			s.slicedSame(op)
		}
	}
}

// sliceShape is a set of widths for the sliced ops: KDA channels and heads (head width ch/heads), MLA
// heads, nope, shared, value and latent widths.
type sliceShape struct{ ch, heads, mh, nope, shared, vdim, lat int }

// slicedSame compares each slicing of the wave with the whole wave, bit for bit.
func (s *suite) slicedSame(op slicedOp) {
	l := layout(sliceLens...)
	rows := l.Tokens()
	data := make([][]float32, len(op.cols))
	for i, c := range op.cols {
		data[i] = s.normals(rows*c, 1)
	}
	input := func(lo, hi int) []ops.Tensor {
		in := make([]ops.Tensor, len(op.cols))
		for i, c := range op.cols {
			in[i] = s.act(hi-lo, c, data[i][lo*c:hi*c])
		}
		return in
	}
	in := input(0, rows)
	out, _, err := op.run(in, ops.Whole(l), nil, true)
	s.must(err, op.name+" over the whole wave")
	want := s.hostBits(out)
	s.free(out)
	for _, x := range in {
		s.b.Free(x)
	}
	for _, n := range sliceSizes {
		slices := ops.CutSlices(l, n)
		bounds := ops.SliceBounds(slices)
		var carry ops.Carry
		var got [][]uint32
		for j, sl := range slices {
			in := input(bounds[j], bounds[j+1])
			out, next, err := op.run(in, sl, carry, false)
			s.must(err, fmt.Sprintf("%s, slices of %d: slice %d (%v)", op.name, n, j, sl))
			if (next != nil) != sl.Open {
				s.Fatalf("%s, slices of %d: slice %d (%v) returned carry %v", op.name, n, j, sl, next != nil)
			}
			got = append(got, s.hostBits(out)...)
			s.free(out, carry)
			for _, x := range in {
				s.b.Free(x)
			}
			carry = next
		}
		if len(got) != len(want) {
			s.Fatalf("%s, slices of %d: %d rows, want %d", op.name, n, len(got), len(want))
		}
		for r := range want {
			if fmt.Sprint(got[r]) != fmt.Sprint(want[r]) {
				s.Errorf("%s over %v in slices of %d: row %d differs from the unsliced op", op.name, sliceLens, n, r)
				break
			}
		}
	}
}

// slicedOps lists the three token-mixing ops at the widths of sh.
func (s *suite) slicedOps(sl ops.Slicer, sh sliceShape) []slicedOp {
	const kk = 4
	ch, heads := sh.ch, sh.heads
	mh, nope, shared, vdim, lat := sh.mh, sh.nope, sh.shared, sh.vdim, sh.lat
	b := s.b
	conv, _ := s.weightF32(ch, kk, s.normals(ch*kk, 0.5))
	aLog, _ := s.weightF32(1, heads+2, s.normals(heads+2, 0.5))
	dtBias, _ := s.weightF32(1, ch, s.normals(ch, 0.5))
	kvb, _ := s.randWeight(mh*(nope+vdim), lat, 1/math.Sqrt(float64(lat)))
	s.Cleanup(func() { s.free(conv, aLog, dtBias, kvb) })
	sliced := []slicedOp{
		{fmt.Sprintf("ShortConvSiLU %d channels", ch), []int{ch}, func(x []ops.Tensor, l ops.SliceLayout, in ops.Carry, whole bool) (ops.Tensor, ops.Carry, error) {
			if whole {
				out, err := b.ShortConvSiLU(x[0], conv, l.Layout)
				return out, nil, err
			}
			return sl.ShortConvSiLUSlice(x[0], conv, l, in)
		}},
		{fmt.Sprintf("KDA %d heads of %d", heads, ch/heads), []int{ch, ch, ch, ch, heads}, func(x []ops.Tensor, l ops.SliceLayout, in ops.Carry, whole bool) (ops.Tensor, ops.Carry, error) {
			if whole {
				out, err := b.KDA(x[0], x[1], x[2], x[3], x[4], aLog, dtBias, heads, -5, l.Layout)
				return out, nil, err
			}
			return sl.KDASlice(x[0], x[1], x[2], x[3], x[4], aLog, dtBias, heads, -5, l, in)
		}},
		{fmt.Sprintf("MLA %d heads of %d+%d, values %d", mh, nope, shared, vdim), []int{mh * (nope + shared), lat, shared}, func(x []ops.Tensor, l ops.SliceLayout, in ops.Carry, whole bool) (ops.Tensor, ops.Carry, error) {
			// the kv rows come from the latent rows, as in the model, so a carried latent expands to them
			kv, err := b.MatMul(x[1], kvb)
			if err != nil {
				return nil, nil, err
			}
			defer b.Free(kv)
			if whole {
				out, err := b.MLA(x[0], kv, x[2], mh, nope, shared, vdim, l.Layout)
				return out, nil, err
			}
			return sl.MLASlice(x[0], kv, x[2], x[1], kvb, mh, nope, shared, vdim, l, in)
		}},
	}
	if lk, ok := b.(ops.LatentKeys); ok && lk.MLAFromLatent(mh, nope, shared, vdim, lat) {
		sliced = append(sliced, slicedOp{fmt.Sprintf("MLA %d heads of %d+%d, values %d, keys from the latent", mh, nope, shared, vdim), []int{mh * (nope + shared), lat, shared}, func(x []ops.Tensor, l ops.SliceLayout, in ops.Carry, whole bool) (ops.Tensor, ops.Carry, error) {
			if whole {
				out, err := lk.MLALatent(x[0], x[1], x[2], kvb, mh, nope, shared, vdim, l.Layout)
				return out, nil, err
			}
			return sl.MLASlice(x[0], nil, x[2], x[1], kvb, mh, nope, shared, vdim, l, in)
		}})
	}
	return sliced
}
