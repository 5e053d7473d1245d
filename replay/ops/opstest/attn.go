package opstest

import (
	"fmt"
	"math"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// attnTests cover the ops that mix tokens within a sequence.
var attnTests = []test{
	{"ShortConvSiLU", testShortConv},
	{"KDA", testKDA},
	{"MLA", testMLA},
	{"MLALatent", testMLALatent},
}

// testShortConv: a wave of uneven sequences and one long sequence, 4 taps.
func testShortConv(s *suite) {
	const ch, kk = 48, 4
	for _, lens := range [][]int{unevenLens, {129}, {1}} {
		l := layout(lens...)
		rows := l.Tokens()
		x, xv := s.randAct(rows, ch, 1)
		w, wv := s.weightF32(ch, kk, s.normals(ch*kk, 0.5))
		out, err := s.b.ShortConvSiLU(x, w, l)
		s.must(err, "ShortConvSiLU")
		ref := refShortConv(xv, wv, ch, kk, l.Starts, s.rd)
		got := s.host(out, rows, ch)
		what := fmt.Sprintf("ShortConvSiLU over sequences %v", lens)
		s.close(what, got, ref, ch, s.tol(ref))
		s.roundedOutput(what, got, ref)
		s.free(x, w, out)
	}
}

// kdaCase is one KDA configuration: heads x d channels over sequences of the given lengths.
type kdaCase struct {
	heads, d int
	lens     []int
}

var kdaCases = []kdaCase{{1, 32, unevenLens}, {4, 16, unevenLens}, {2, 128, []int{3, 70}}}

// randKDA makes KDA inputs for c: tensors for the backend and the same values for the reference.
func (s *suite) randKDA(c kdaCase) ([]ops.Tensor, kdaIn) {
	l := layout(c.lens...)
	rows, ch := l.Tokens(), c.heads*c.d
	q, qv := s.randAct(rows, ch, 1)
	k, kv := s.randAct(rows, ch, 1)
	v, vv := s.randAct(rows, ch, 1)
	g, gv := s.randAct(rows, ch, 1)
	b, bv := s.randAct(rows, c.heads, 1.5)
	a, av := s.weightF32(1, c.heads+3, s.normals(c.heads+3, 0.5)) // padded, as K3's A_log: only the first `heads` count
	dt, dtv := s.weightF32(1, ch, s.normals(ch, 0.5))
	in := kdaIn{q: qv, k: kv, v: vv, graw: gv, braw: bv, aLog: av, dtBias: dtv, heads: c.heads, ch: ch, lower: -5, starts: l.Starts}
	return []ops.Tensor{q, k, v, g, b, a, dt}, in
}

func (s *suite) runKDA(t []ops.Tensor, in kdaIn) ops.Tensor {
	s.Helper()
	out, err := s.b.KDA(t[0], t[1], t[2], t[3], t[4], t[5], t[6], in.heads, float32(in.lower), ops.Layout{Starts: in.starts})
	s.must(err, "KDA")
	return out
}

// testKDA: the backend against the step recurrence, and the step recurrence against the chunked form.
func testKDA(s *suite) {
	for _, c := range kdaCases {
		ts, in := s.randKDA(c)
		step := refKDAStep(in)
		chunked := refKDAChunked(in)
		what := fmt.Sprintf("KDA %d heads of %d over sequences %v", c.heads, c.d, c.lens)
		// the two float64 forms differ only by float64 rounding
		closeTo(s, what+": chunked reference vs step reference", chunked, step, in.ch, tol{abs: 1e-9 * rms(step), rel: 1e-9})
		ref := make([]float64, len(step))
		for i, x := range step {
			ref[i] = s.rd(x)
		}
		out := s.runKDA(ts, in)
		got := s.host(out, len(step)/in.ch, in.ch)
		// float32 state over up to 70 steps: the recurrence is contractive, errors stay near one rounding
		s.close(what, got, ref, in.ch, s.tol(ref).scaled(4))
		s.roundedOutput(what, got, ref)
		s.free(out)
		for _, t := range ts {
			s.b.Free(t)
		}
	}
}

// mlaCase is one MLA configuration.
type mlaCase struct {
	heads, nope, shared, vdim int
	lens                      []int
	qScale                    float64 // scores are of order qScale
}

// The last case has scores of order 100 across a sequence: a softmax without its max shift overflows.
var mlaCases = []mlaCase{{1, 16, 8, 12, unevenLens, 1}, {4, 16, 8, 12, unevenLens, 1}, {2, 128, 64, 128, []int{3, 17}, 1},
	{2, 16, 8, 12, unevenLens, 25}}

func (s *suite) randMLA(c mlaCase) ([]ops.Tensor, mlaIn) {
	l := layout(c.lens...)
	rows := l.Tokens()
	q, qv := s.randAct(rows, c.heads*(c.nope+c.shared), c.qScale)
	kv, kvv := s.randAct(rows, c.heads*(c.nope+c.vdim), 1)
	ks, ksv := s.randAct(rows, c.shared, 1)
	return []ops.Tensor{q, kv, ks}, mlaIn{q: qv, kv: kvv, ks: ksv, heads: c.heads, nope: c.nope, shared: c.shared, vdim: c.vdim, starts: l.Starts}
}

func (s *suite) runMLA(t []ops.Tensor, in mlaIn) ops.Tensor {
	s.Helper()
	out, err := s.b.MLA(t[0], t[1], t[2], in.heads, in.nope, in.shared, in.vdim, ops.Layout{Starts: in.starts})
	s.must(err, "MLA")
	return out
}

// testMLA: the backend against a masked full T x T softmax per sequence and head.
func testMLA(s *suite) {
	for _, c := range mlaCases {
		ts, in := s.randMLA(c)
		ref := refMLA(in, s.rd)
		out := s.runMLA(ts, in)
		cols := c.heads * c.vdim
		got := s.host(out, len(ref)/cols, cols)
		what := fmt.Sprintf("MLA %d heads (%d+%d, v %d) over sequences %v, scores of order %g", c.heads, c.nope, c.shared, c.vdim, c.lens, c.qScale)
		// float32 score errors grow with the scores and enter the exponent
		s.close(what, got, ref, cols, s.tol(ref).scaled(2*c.qScale))
		s.roundedOutput(what, got, ref)
		s.free(out)
		for _, t := range ts {
			s.b.Free(t)
		}
	}
}

// latentCases are head sizes for keys from the latent: K3's heads of 128 + 64 with values of 128, and
// small ones whose key and value arrays are padded (48 to 64, 16 to 64), over waves with sequences longer
// than a 64-row key block.
var latentCases = []struct {
	heads, nope, shared, vdim, lat int
	lens                           []int
}{{2, 128, 64, 128, 32, []int{3, 17, 130}}, {3, 32, 16, 16, 16, unevenLens}, {4, 16, 8, 32, 24, []int{200}}}

// testMLALatent: a backend's MLA with the keys expanded from the latent (ops.LatentKeys, optional)
// against its MLA over kv = MatMul(latent, kv_b): within the tolerance, every output a bfloat16 value in
// BF16 precision, and nearly all of them equal (the expansion may sum in another order than MatMul and
// round a key or value the other way), and a kv_b of the wrong shape refused.
func testMLALatent(s *suite) {
	lk, ok := s.b.(ops.LatentKeys)
	if !ok {
		s.Skipf("backend %s has no keys from the latent (ops.LatentKeys)", s.b.Name())
	}
	ran := 0
	for _, c := range latentCases {
		if !lk.MLAFromLatent(c.heads, c.nope, c.shared, c.vdim, c.lat) {
			continue
		}
		ran++
		l := layout(c.lens...)
		rows, cols := l.Tokens(), c.heads*c.vdim
		q, _ := s.randAct(rows, c.heads*(c.nope+c.shared), 1)
		lat, _ := s.randAct(rows, c.lat, 1)
		ks, _ := s.randAct(rows, c.shared, 1)
		kvb, _ := s.randWeight(c.heads*(c.nope+c.vdim), c.lat, 1/math.Sqrt(float64(c.lat)))
		kv, err := s.b.MatMul(lat, kvb)
		s.must(err, "MatMul(latent, kv_b)")
		want, err := s.b.MLA(q, kv, ks, c.heads, c.nope, c.shared, c.vdim, l)
		s.must(err, "MLA")
		got, err := lk.MLALatent(q, lat, ks, kvb, c.heads, c.nope, c.shared, c.vdim, l)
		s.must(err, "MLALatent")
		what := fmt.Sprintf("MLA %d heads (%d+%d, v %d) with keys from a latent of %d over sequences %v", c.heads, c.nope, c.shared, c.vdim, c.lat, c.lens)
		w, g := s.host(want, rows, cols), s.host(got, rows, cols)
		ref := make([]float64, len(w))
		for i, x := range w {
			ref[i] = float64(x)
		}
		s.close(what, g, ref, cols, s.tol(ref).scaled(2))
		s.roundedOutput(what, g, ref)
		bad, _ := s.randWeight(c.heads*(c.nope+c.vdim)+1, c.lat, 1)
		s.fails(what+" with a kv_b of one row too many", func() error {
			out, err := lk.MLALatent(q, lat, ks, bad, c.heads, c.nope, c.shared, c.vdim, l)
			s.free(out)
			return err
		})
		s.free(want, got, kv, q, lat, ks, kvb, bad)
	}
	if ran == 0 {
		s.Skipf("backend %s takes keys from the latent for none of the cases", s.b.Name())
	}
}
