package opstest

import (
	"fmt"
	"math"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// batchTests check batch invariance, op by op: run on a wave of uneven sequences, every sequence's rows
// must carry exactly the bits of the op run on that sequence alone (DESIGN.md, Numerics). Row-wise ops
// see each sequence as a block of rows; ShortConvSiLU, KDA and MLA get the layout.
var batchTests = []test{{"BatchInvariance", testBatchInvariance}}

// waveOp runs one op on activations in (rows l.Tokens(), widths as declared) that are the wave's rows
// from first on, and returns each output row as bits.
type waveOp struct {
	name string
	cols []int // widths of the activation inputs
	run  func(in []ops.Tensor, l ops.Layout, first int) [][]uint32
}

func testBatchInvariance(s *suite) {
	for _, op := range s.waveOps() {
		s.batchInvariant(op)
	}
}

// batchInvariant compares the wave's result with each sequence alone.
func (s *suite) batchInvariant(op waveOp) {
	l := layout(unevenLens...)
	rows := l.Tokens()
	data := make([][]float32, len(op.cols))
	for i, c := range op.cols {
		data[i] = s.normals(rows*c, 1)
	}
	run := func(r0, r1 int) [][]uint32 {
		in := make([]ops.Tensor, len(op.cols))
		for i, c := range op.cols {
			in[i] = s.act(r1-r0, c, data[i][r0*c:r1*c])
		}
		seq := l
		if r0 != 0 || r1 != rows {
			seq = layout(r1 - r0)
		}
		out := op.run(in, seq, r0)
		for _, x := range in {
			s.b.Free(x)
		}
		if len(out) != r1-r0 {
			s.Fatalf("%s: %d result rows for %d rows", op.name, len(out), r1-r0)
		}
		return out
	}
	wave := run(0, rows)
	for q := range l.Sequences() {
		r0, r1 := l.Starts[q], l.Starts[q+1]
		alone := run(r0, r1)
		for r := range alone {
			if fmt.Sprint(alone[r]) != fmt.Sprint(wave[r0+r]) {
				s.Errorf("%s: sequence %d (rows %d..%d of the wave %v): row %d alone differs from the same row in the wave",
					op.name, q, r0, r1-1, unevenLens, r)
				return
			}
		}
	}
}

// rowBits splits a result's values into rows of bits and frees it.
func (s *suite) rowBits(x ops.Tensor, err error) [][]uint32 {
	s.Helper()
	s.must(err, "op")
	defer s.b.Free(x)
	return s.hostBits(x)
}

// hostBits splits a tensor's values into rows of bits.
func (s *suite) hostBits(x ops.Tensor) [][]uint32 {
	s.Helper()
	return splitBits(s.host(x, x.Rows(), x.Cols()), x.Cols())
}

func splitBits(v []float32, cols int) [][]uint32 {
	var out [][]uint32
	for r := 0; cols > 0 && r < len(v)/cols; r++ {
		row := make([]uint32, cols)
		for c := range row {
			row[c] = math.Float32bits(v[r*cols+c])
		}
		out = append(out, row)
	}
	return out
}

// waveOps lists every op as a waveOp, with its weights made once.
func (s *suite) waveOps() []waveOp {
	b := s.b
	const d = 40
	w, _ := s.randWeight(24, d, 0.2)
	norm, _ := s.weightF32(1, 8, s.uniforms(8, 0.5, 1.5))
	wg, _ := s.weightF32(1, d, s.normals(d, 0.3))
	table, _ := s.randWeight(50, d, 1)
	taps, _ := s.weightF32(d, 4, s.normals(4*d, 0.5))
	aLog, _ := s.weightF32(1, 2, s.normals(2, 0.5))
	dt, _ := s.weightF32(1, 32, s.normals(32, 0.5))
	bias, _ := s.weightF32(1, 24, s.normals(24, 0.05))
	rows := layout(unevenLens...).Tokens()
	ids := make([]int32, rows)
	for i := range ids {
		ids[i] = int32(s.rng.IntN(50))
	}
	targets := append([]int32(nil), ids...)
	targets[3] = -1
	rt := s.randRouting(rows, 2, 4)
	var experts []ops.Expert
	for id := range 4 {
		experts = append(experts, s.upload(s.randExpert(id, 32, 64)))
	}
	s.Cleanup(func() {
		s.free(w, norm, wg, table, taps, aLog, dt, bias)
		for _, e := range experts {
			b.Free(e)
		}
	})
	one := func(f func(in []ops.Tensor) (ops.Tensor, error)) func([]ops.Tensor, ops.Layout, int) [][]uint32 {
		return func(in []ops.Tensor, _ ops.Layout, _ int) [][]uint32 { return s.rowBits(f(in)) }
	}
	return []waveOp{
		{"Gather", nil, func(_ []ops.Tensor, l ops.Layout, first int) [][]uint32 {
			return s.rowBits(b.Gather(table, ids[first:first+l.Tokens()]))
		}},
		{"MatMul", []int{d}, one(func(in []ops.Tensor) (ops.Tensor, error) { return b.MatMul(in[0], w) })},
		{"Slice", []int{d}, one(func(in []ops.Tensor) (ops.Tensor, error) { return b.Slice(in[0], 3, 17) })},
		{"Add", []int{d, d}, one(func(in []ops.Tensor) (ops.Tensor, error) { return b.Add(in[0], in[1]) })},
		{"Round", []int{d}, one(func(in []ops.Tensor) (ops.Tensor, error) { return b.Round(in[0]) })},
		{"RMSNorm", []int{d}, one(func(in []ops.Tensor) (ops.Tensor, error) { return b.RMSNorm(in[0], norm, 1e-5) })},
		{"GatedRMSNorm", []int{d, d}, one(func(in []ops.Tensor) (ops.Tensor, error) { return b.GatedRMSNorm(in[0], norm, in[1], 1e-5) })},
		{"MulSigmoid", []int{d, d}, one(func(in []ops.Tensor) (ops.Tensor, error) { return b.MulSigmoid(in[0], in[1]) })},
		{"SiTUGLU", []int{d, d}, one(func(in []ops.Tensor) (ops.Tensor, error) { return b.SiTUGLU(in[0], in[1], 4, 25) })},
		{"AttnResMix", []int{d, d, d}, func(in []ops.Tensor, _ ops.Layout, _ int) [][]uint32 {
			out, p, err := b.AttnResMix(in, wg)
			res := s.rowBits(out, err)
			for r, row := range splitBits(p, len(in)) {
				res[r] = append(res[r], row...)
			}
			return res
		}},
		{"ShortConvSiLU", []int{d}, func(in []ops.Tensor, l ops.Layout, _ int) [][]uint32 {
			return s.rowBits(b.ShortConvSiLU(in[0], taps, l))
		}},
		{"KDA", []int{32, 32, 32, 32, 2}, func(in []ops.Tensor, l ops.Layout, _ int) [][]uint32 {
			return s.rowBits(b.KDA(in[0], in[1], in[2], in[3], in[4], aLog, dt, 2, -5, l))
		}},
		{"MLA", []int{2 * 12, 2 * 18, 4}, func(in []ops.Tensor, l ops.Layout, _ int) [][]uint32 {
			return s.rowBits(b.MLA(in[0], in[1], in[2], 2, 8, 4, 10, l))
		}},
		{"Route", []int{d}, func(in []ops.Tensor, _ ops.Layout, _ int) [][]uint32 {
			r, err := b.Route(in[0], w, bias, 5, 2.5)
			s.must(err, "Route")
			res := make([][]uint32, in[0].Rows())
			for i := range res {
				for j := range r.K {
					res[i] = append(res[i], uint32(r.IDs[i*r.K+j]), math.Float32bits(r.Weights[i*r.K+j]))
				}
			}
			return res
		}},
		{"ExpertsAccumulate", []int{32, 32}, func(in []ops.Tensor, l ops.Layout, first int) [][]uint32 {
			n := l.Tokens()
			sub := ops.Routing{K: rt.K, IDs: rt.IDs[first*rt.K : (first+n)*rt.K], Weights: rt.Weights[first*rt.K : (first+n)*rt.K]}
			s.must(b.ExpertsAccumulate(in[0], in[1], sub, experts, 4, 25), "ExpertsAccumulate")
			return s.hostBits(in[0])
		}},
		{"TokenStats", []int{d}, func(in []ops.Tensor, l ops.Layout, first int) [][]uint32 {
			st, err := b.TokenStats(in[0], table, targets[first:first+l.Tokens()], 3)
			s.must(err, "TokenStats")
			res := make([][]uint32, len(st))
			for i, x := range st {
				res[i] = []uint32{math.Float32bits(x.Logprob), uint32(x.Rank), math.Float32bits(x.Entropy)}
				for j := range x.TopIDs {
					res[i] = append(res[i], uint32(x.TopIDs[j]), math.Float32bits(x.TopLogp[j]))
				}
			}
			return res
		}},
	}
}
