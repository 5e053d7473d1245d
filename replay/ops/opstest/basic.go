package opstest

import (
	"fmt"
	"math"

	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// basicTests cover the data movement ops and the error contract.
var basicTests = []test{
	{"Upload", testUpload},
	{"FromHost", testFromHost},
	{"ZerosRound", testZerosRound},
	{"Gather", testGather},
	{"Slice", testSlice},
	{"JoinRows", testJoinRows},
	{"Add", testAdd},
	{"AddSum", testAddSum},
	{"MatMulNarrow", testMatMulNarrow},
	{"Errors", testErrors},
}

// testJoinRows holds ops.RowJoiner to its contract: the parts' rows one after the other, bit for bit,
// for part sizes that hit the tails (an empty part among them), one part alone, the parts untouched;
// mismatched columns and no parts fail.
func testJoinRows(s *suite) {
	j, ok := s.b.(ops.RowJoiner)
	if !ok {
		s.Skip("the backend has no ops.RowJoiner")
	}
	const cols = 24
	for _, sizes := range [][]int{{1}, {63, 1, 65}, {129, 0, 7}} {
		var parts []ops.Tensor
		var want []float32
		for _, n := range sizes {
			x, _ := s.randAct(n, cols, 2)
			parts = append(parts, x)
			want = append(want, s.host(x, n, cols)...)
		}
		out, err := j.JoinRows(parts)
		s.must(err, "JoinRows")
		total := len(want) / cols
		s.same(fmt.Sprintf("JoinRows of parts of %v rows", sizes), s.host(out, total, cols), want, cols)
		at := 0
		for i, p := range parts { // untouched
			s.same(fmt.Sprintf("JoinRows' part %d afterwards", i), s.host(p, sizes[i], cols), want[at*cols:(at+sizes[i])*cols], cols)
			at += sizes[i]
		}
		s.free(out)
		for _, p := range parts {
			s.free(p)
		}
	}
	a, b := s.act(2, 3, make([]float32, 6)), s.act(2, 4, make([]float32, 8))
	s.fails("JoinRows of parts of 3 and 4 columns", func() error { _, err := j.JoinRows([]ops.Tensor{a, b}); return err })
	s.fails("JoinRows of no parts", func() error { _, err := j.JoinRows(nil); return err })
	s.free(a, b)
}

// testUpload: weights decode exactly in both precisions, F32 values that are not bfloat16 included.
func testUpload(s *suite) {
	rows, cols := 3, 37
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = float32(s.rng.NormFloat64()) // not bfloat16 values: an F32 weight keeps them
	}
	w, _ := s.weightF32(rows, cols, v)
	s.same("F32 weight", s.host(w, rows, cols), v, cols)
	wb, _ := s.weightBF16(rows, cols, v)
	wantB := append([]float32(nil), v...)
	bf16.RoundSlice(wantB)
	s.same("BF16 weight", s.host(wb, rows, cols), wantB, cols)
	s.fails("Upload with a short buffer", func() error {
		_, err := s.b.Upload(ops.WeightBF16, rows, cols, make([]byte, 2*rows*cols-1))
		return err
	})
	s.fails("Upload F32 with a BF16-sized buffer", func() error {
		_, err := s.b.Upload(ops.WeightF32, rows, cols, make([]byte, 2*rows*cols))
		return err
	})
	s.free(w, wb)
}

// testFromHost: FromHost rounds to nearest even in BF16 and keeps float32 in FP32; ToHost returns it.
func testFromHost(s *suite) {
	in := []float32{1.00390625, 1.01171875, -2.5, 3.3, float32(math.Copysign(0, -1)), 1e-3}
	x := s.act(2, 3, in)
	got := s.host(x, 2, 3)
	want := make([]float32, len(in))
	for i, v := range in {
		want[i] = v
		if s.bf {
			want[i] = bf16.Round(v) // 1.00390625 -> 1 (tie to even), 1.01171875 -> 1.015625 (tie to even, up)
		}
	}
	s.same("FromHost then ToHost", got, want, 3)
	s.fails("FromHost with a wrong length", func() error {
		_, err := s.b.FromHost(2, 3, in[:5])
		return err
	})
	s.free(x)
}

// testZerosRound: Zeros is all zeros; Round rounds an unrounded (F32 weight) tensor in BF16 only.
func testZerosRound(s *suite) {
	z, err := s.b.Zeros(65, 7)
	s.must(err, "Zeros")
	s.same("Zeros", s.host(z, 65, 7), make([]float32, 65*7), 7)
	v := make([]float32, 65*7)
	for i := range v {
		v[i] = float32(s.rng.NormFloat64())
	}
	w, _ := s.weightF32(65, 7, v)
	r, err := s.b.Round(w)
	s.must(err, "Round")
	want := append([]float32(nil), v...)
	if s.bf {
		bf16.RoundSlice(want)
	}
	s.same("Round", s.host(r, 65, 7), want, 7)
	s.free(z, w, r)
}

// testGather: out[i] = table[ids[i]] for row counts that hit the tails.
func testGather(s *suite) {
	table, tv := s.randWeight(300, 24, 1)
	for _, n := range tailRows {
		ids := make([]int32, n)
		want := make([]float64, 0, n*24)
		for i := range ids {
			ids[i] = int32(s.rng.IntN(300))
			want = append(want, tv[int(ids[i])*24:int(ids[i]+1)*24]...)
		}
		out, err := s.b.Gather(table, ids)
		s.must(err, "Gather")
		s.close(fmt.Sprintf("Gather %d rows", n), s.host(out, n, 24), want, 24, tol{})
		s.free(out)
	}
	s.fails("Gather of id 300 from 300 rows", func() error { _, err := s.b.Gather(table, []int32{0, 300}); return err })
	s.fails("Gather of id -1", func() error { _, err := s.b.Gather(table, []int32{-1}); return err })
	s.free(table)
}

// testSlice: columns [from, to) copied without rounding.
func testSlice(s *suite) {
	x, xv := s.randAct(65, 40, 1)
	for _, r := range [][2]int{{0, 40}, {0, 1}, {7, 33}, {39, 40}, {12, 12}} {
		out, err := s.b.Slice(x, r[0], r[1])
		s.must(err, "Slice")
		w := r[1] - r[0]
		want := make([]float64, 0, 65*w)
		for i := range 65 {
			want = append(want, xv[i*40+r[0]:i*40+r[1]]...)
		}
		s.close(fmt.Sprintf("Slice [%d,%d)", r[0], r[1]), s.host(out, 65, w), want, w, tol{})
		s.free(out)
	}
	s.fails("Slice past the end", func() error { _, err := s.b.Slice(x, 30, 41); return err })
	s.fails("Slice backwards", func() error { _, err := s.b.Slice(x, 5, 4); return err })
	s.free(x)
}

// testAdd: rounded(a + b).
func testAdd(s *suite) {
	for _, n := range tailRows {
		a, av := s.randAct(n, 33, 1)
		b, bv := s.randAct(n, 33, 0.01) // small against a: the sum is not a bfloat16 value, so it must round
		out, err := s.b.Add(a, b)
		s.must(err, "Add")
		ref := make([]float64, len(av))
		for i := range av {
			ref[i] = s.rd(av[i] + bv[i])
		}
		got := s.host(out, n, 33)
		s.close(fmt.Sprintf("Add %d rows", n), got, ref, 33, s.tol(ref))
		s.roundedOutput("Add", got, ref)
		s.free(a, b, out)
	}
}

// testAddSum: a backend's AddSum (ops.SumAdder, optional) equals Add(p, Add(a, b)) bit for bit over
// every tail row count, at widths of whole and partial quads (32, 33, 7), with plain activations and with
// a and b MatMul outputs (a device backend may leave their rounding to the reader) of sizes whose sum
// must round; mismatched shapes fail. Skipped for a backend without it.
func testAddSum(s *suite) {
	sa, ok := s.b.(ops.SumAdder)
	if !ok {
		s.Skipf("backend %s has no AddSum (ops.SumAdder)", s.b.Name())
	}
	for _, cols := range []int{32, 33, 7} {
		w1, _ := s.randWeight(cols, 40, 1/math.Sqrt(40))
		w2, _ := s.randWeight(cols, 40, 0.01/math.Sqrt(40))
		for _, n := range tailRows {
			for _, products := range []bool{false, true} {
				p, _ := s.randAct(n, cols, 1)
				var a, b ops.Tensor
				if products {
					x, _ := s.randAct(n, 40, 1)
					var err error
					a, err = s.b.MatMul(x, w1)
					s.must(err, "MatMul")
					b, err = s.b.MatMul(x, w2)
					s.must(err, "MatMul")
					s.free(x)
				} else {
					a, _ = s.randAct(n, cols, 0.1)
					b, _ = s.randAct(n, cols, 0.001)
				}
				ab, err := s.b.Add(a, b)
				s.must(err, "Add")
				want, err := s.b.Add(p, ab)
				s.must(err, "Add")
				got, err := sa.AddSum(p, a, b)
				what := fmt.Sprintf("AddSum over %d x %d (MatMul outputs %v)", n, cols, products)
				s.must(err, what)
				s.same(what+" against Add(p, Add(a, b))", s.host(got, n, cols), s.host(want, n, cols), cols)
				s.free(p, a, b, ab, want, got)
			}
		}
		s.free(w1, w2)
	}
	x, _ := s.randAct(4, 8, 1)
	y, _ := s.randAct(4, 9, 1)
	s.fails("AddSum of 4x8, 4x8 and 4x9", func() error { _, err := sa.AddSum(x, x, y); return err })
	s.fails("AddSum of 4x9, 4x8 and 4x8", func() error { _, err := sa.AddSum(y, x, x); return err })
	s.free(x, y)
}

// testMatMulNarrow: a backend's MatMulNarrow (ops.NarrowMatMuler, optional) equals MatMul bit for bit
// over every tail row count, at output widths of whole and partial quads and a KDA-like 4-tap channel
// count, with bfloat16 and float32 weights; its output read by ShortConvSiLU (its reader in the model) and
// by Add (any other op) gives MatMul's output's bits there too; mismatched shapes fail. Skipped for a
// backend without it.
func testMatMulNarrow(s *suite) {
	nm, ok := s.b.(ops.NarrowMatMuler)
	if !ok {
		s.Skipf("backend %s has no MatMulNarrow (ops.NarrowMatMuler)", s.b.Name())
	}
	const k = 40
	for _, m := range []int{64, 33, 8} {
		for _, f32 := range []bool{false, true} {
			var w ops.Tensor
			if f32 {
				v := make([]float32, m*k)
				for i := range v {
					v[i] = float32(s.rng.NormFloat64() / math.Sqrt(k))
				}
				w, _ = s.weightF32(m, k, v)
			} else {
				w, _ = s.randWeight(m, k, 1/math.Sqrt(k))
			}
			taps, _ := s.randAct(m, 4, 0.5)
			for _, n := range tailRows {
				x, _ := s.randAct(n, k, 1)
				want, err := s.b.MatMul(x, w)
				s.must(err, "MatMul")
				got, err := nm.MatMulNarrow(x, w)
				what := fmt.Sprintf("MatMulNarrow of %d x %d by %d x %d (float32 weight %v)", n, k, m, k, f32)
				s.must(err, what)
				l := ops.Layout{Starts: []int{0, n / 2, n}}
				cw, err := s.b.ShortConvSiLU(want, taps, l)
				s.must(err, "ShortConvSiLU of MatMul's output")
				cg, err := s.b.ShortConvSiLU(got, taps, l)
				s.must(err, "ShortConvSiLU of MatMulNarrow's output")
				s.same(what+": ShortConvSiLU of it against of MatMul's", s.host(cg, n, m), s.host(cw, n, m), m)
				aw, err := s.b.Add(want, want)
				s.must(err, "Add")
				ag, err := s.b.Add(got, got)
				s.must(err, "Add")
				s.same(what+": Add of it against of MatMul's", s.host(ag, n, m), s.host(aw, n, m), m)
				s.same(what+" against MatMul", s.host(got, n, m), s.host(want, n, m), m)
				s.free(x, want, got, cw, cg, aw, ag)
			}
			s.free(w, taps)
		}
	}
	x, _ := s.randAct(4, 8, 1)
	w, _ := s.randWeight(3, 9, 1)
	s.fails("MatMulNarrow with inner sizes 8 and 9", func() error { _, err := nm.MatMulNarrow(x, w); return err })
	s.free(x, w)
}

// testErrors: bad shapes and freed tensors give errors, never panics; Free(nil) is a no-op.
func testErrors(s *suite) {
	b := s.b
	x, _ := s.randAct(4, 8, 1)
	y, _ := s.randAct(4, 9, 1)
	w, _ := s.randWeight(3, 9, 1)
	g, _ := s.randWeight(1, 3, 1) // 3 does not divide 8
	s.fails("MatMul with inner sizes 8 and 9", func() error { _, err := b.MatMul(x, w); return err })
	s.fails("Add of 4x8 and 4x9", func() error { _, err := b.Add(x, y); return err })
	s.fails("MulSigmoid of 4x8 and 4x9", func() error { _, err := b.MulSigmoid(x, y); return err })
	s.fails("SiTUGLU of 4x8 and 4x9", func() error { _, err := b.SiTUGLU(x, y, 4, 25); return err })
	s.fails("RMSNorm with a group of 3 over 8 columns", func() error { _, err := b.RMSNorm(x, g, 1e-5); return err })
	s.fails("AttnResMix of unequal shapes", func() error { _, _, err := b.AttnResMix([]ops.Tensor{x, y}, g); return err })
	s.fails("AttnResMix of nothing", func() error { _, _, err := b.AttnResMix(nil, g); return err })
	s.fails("ShortConvSiLU with a layout of 5 rows over 4", func() error {
		_, err := b.ShortConvSiLU(x, w, layout(5))
		return err
	})
	s.fails("MLA with a q of the wrong width", func() error { _, err := b.MLA(x, x, x, 2, 2, 2, 2, layout(4)); return err })
	s.fails("KDA with 3 heads over 8 channels", func() error {
		_, err := b.KDA(x, x, x, x, x, x, x, 3, -5, layout(4))
		return err
	})
	s.fails("Route with k = 4 of 3 experts", func() error { _, err := b.Route(y, w, g, 4, 1); return err })
	s.fails("TokenStats with 3 targets for 4 rows", func() error { _, err := b.TokenStats(y, w, []int32{0, 1, 2}, 1); return err })
	s.fails("TokenStats with target 3 of 3", func() error { _, err := b.TokenStats(y, w, []int32{0, 1, 2, 3}, 1); return err })
	s.fails("ExpertsAccumulate with a routing of the wrong length", func() error {
		return b.ExpertsAccumulate(x, x, ops.Routing{K: 2, IDs: []int32{0}, Weights: []float32{1}}, nil, 4, 25)
	})
	b.Free(nil)
	b.Free(y)
	s.fails("MatMul of a freed tensor", func() error { _, err := b.MatMul(y, w); return err })
	s.fails("ToHost of a freed tensor", func() error { _, err := b.ToHost(y); return err })
	s.free(x, w, g)
}
