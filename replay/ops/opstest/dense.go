package opstest

import (
	"fmt"
	"math"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// denseTests cover the row-wise ops.
var denseTests = []test{
	{"MatMul", testMatMul},
	{"RMSNorm", testRMSNorm},
	{"MulSigmoid", testMulSigmoid},
	{"GatedRMSNorm", testGatedRMSNorm},
	{"AttnResMix", testAttnResMix},
	{"AttnResMixQuiet", testAttnResMixQuiet},
	{"AttnResMixNorm", testAttnResMixNorm},
	{"SiTUGLU", testSiTUGLU},
	{"SiTUFFN", testSiTUFFN},
}

// testMatMul: every tail row count against (k, m) that hit the column tails and a k longer than 1024.
func testMatMul(s *suite) {
	shapes := [][2]int{{96, 40}, {1, 5}, {33, 1}, {1100, 67}} // {k, m}
	for _, n := range tailRows {
		for _, km := range shapes {
			k, m := km[0], km[1]
			x, xv := s.randAct(n, k, 1)
			w, wv := s.randWeight(m, k, 1/math.Sqrt(float64(k)))
			out, err := s.b.MatMul(x, w)
			s.must(err, "MatMul")
			ref := refMatMul(xv, wv, n, m, k, s.rd)
			got := s.host(out, n, m)
			s.close(fmt.Sprintf("MatMul %dx%d by %dx%d", n, k, m, k), got, ref, m, s.sumTol(ref, k))
			s.roundedOutput("MatMul", got, ref)
			s.free(x, w, out)
		}
	}
}

// testRMSNorm: whole rows and groups (KDA's per-head o_norm), BF16 and F32 weights, both eps.
func testRMSNorm(s *suite) {
	for _, n := range tailRows {
		for _, c := range []struct {
			cols, group int
			eps         float32
			f32         bool
		}{{96, 96, 1e-5, false}, {96, 32, 1e-6, true}, {7, 7, 1e-5, false}} {
			x, xv := s.randAct(n, c.cols, 3)
			wv := make([]float32, c.group)
			for i := range wv {
				wv[i] = float32(1 + 0.5*s.rng.NormFloat64())
			}
			var w ops.Tensor
			var wexact []float64
			if c.f32 {
				w, wexact = s.weightF32(1, c.group, wv)
			} else {
				w, wexact = s.weightBF16(1, c.group, wv)
			}
			out, err := s.b.RMSNorm(x, w, c.eps)
			s.must(err, "RMSNorm")
			ref := refRMSNorm(xv, wexact, c.cols, float64(c.eps), s.rd)
			got := s.host(out, n, c.cols)
			// two rounding points in a row: a one-ulp flip of the first can add to the second
			s.close(fmt.Sprintf("RMSNorm %dx%d groups of %d", n, c.cols, c.group), got, ref, c.cols, s.tol(ref).scaled(2))
			s.roundedOutput("RMSNorm", got, ref)
			s.free(x, w, out)
		}
	}
}

// testMulSigmoid: rounded(x * sigmoid(gate)) over gates from -12 to 12.
func testMulSigmoid(s *suite) {
	for _, n := range tailRows {
		x, xv := s.randAct(n, 50, 2)
		gv := s.uniforms(n*50, -12, 12)
		g := s.act(n, 50, gv)
		out, err := s.b.MulSigmoid(x, g)
		s.must(err, "MulSigmoid")
		ref := refMulSigmoid(xv, f64(gv), s.rd)
		got := s.host(out, n, 50)
		s.close(fmt.Sprintf("MulSigmoid %d rows", n), got, ref, 50, s.tol(ref))
		s.roundedOutput("MulSigmoid", got, ref)
		s.free(x, g, out)
	}
}

// testGatedRMSNorm: equal to MulSigmoid(RMSNorm) bit for bit, and to the reference.
func testGatedRMSNorm(s *suite) {
	for _, n := range tailRows {
		x, xv := s.randAct(n, 64, 1)
		w, wv := s.weightF32(1, 16, s.uniforms(16, 0.5, 1.5))
		gv := s.normals(n*64, 3)
		g := s.act(n, 64, gv)
		fused, err := s.b.GatedRMSNorm(x, w, g, 1e-5)
		s.must(err, "GatedRMSNorm")
		normed, err := s.b.RMSNorm(x, w, 1e-5)
		s.must(err, "RMSNorm")
		pair, err := s.b.MulSigmoid(normed, g)
		s.must(err, "MulSigmoid")
		got := s.host(fused, n, 64)
		s.same(fmt.Sprintf("GatedRMSNorm vs MulSigmoid(RMSNorm) %d rows", n), got, s.host(pair, n, 64), 64)
		ref := refMulSigmoid(refRMSNorm(xv, wv, 64, 1e-5, s.rd), f64(gv), s.rd)
		s.close(fmt.Sprintf("GatedRMSNorm %d rows", n), got, ref, 64, s.tol(ref).scaled(3)) // three rounding points
		s.free(x, w, g, fused, normed, pair)
	}
}

// testAttnResMix: 1, 2 and 9 vectors (9 is K3's most: 8 blocks and the partial sum), weights included.
func testAttnResMix(s *suite) {
	const cols = 96
	for _, n := range tailRows {
		// the last case has scores of order 100: a softmax without its max shift overflows float32 there,
		// and float32 score errors of ~100 ulp enter the exponent, hence its wider tolerance
		for _, c := range []struct {
			count             int
			wgScale, tolScale float64
		}{{1, 0.3, 1}, {2, 0.3, 1}, {9, 0.3, 1}, {9, 10, 32}} {
			count := c.count
			vs, vv := s.mixVectors(n, cols, count)
			wg, wgv := s.weightF32(1, cols, s.normals(cols, c.wgScale))
			out, p, err := s.b.AttnResMix(vs, wg)
			s.must(err, "AttnResMix")
			ref, refP := refAttnRes(vv, wgv, n, cols, s.rd)
			got := s.host(out, n, cols)
			what := fmt.Sprintf("AttnResMix of %d over %d rows, wg scale %g", count, n, c.wgScale)
			mag := make([]float64, len(ref)) // sum_i p_i |v_i|: a float32 error in p_i moves the output by p_i |v_i| times it
			for r := range n {
				for i, v := range vv {
					for d := range cols {
						mag[r*cols+d] += refP[r*count+i] * math.Abs(v[r*cols+d])
					}
				}
			}
			s.close(what, got, ref, cols, s.magTol(mag, 4*c.tolScale))
			s.roundedOutput(what, got, ref)
			if len(p) != n*count {
				s.Errorf("%s: %d weights, want %d", what, len(p), n*count)
			} else {
				// weights are softmax outputs in float32 whatever the precision
				s.close(what+" weights", p, refP, count, tol{abs: 1e-6 * c.tolScale, rel: 1e-5 * c.tolScale})
			}
			s.free(wg, out)
			s.freeAll(vs)
		}
	}
}

// testSiTUGLU: gate and up from -40 to 40, past both tanh knees.
func testSiTUGLU(s *suite) {
	for _, n := range tailRows {
		av, bv := s.uniforms(n*70, -40, 40), s.uniforms(n*70, -40, 40)
		a, b := s.act(n, 70, av), s.act(n, 70, bv)
		out, err := s.b.SiTUGLU(a, b, 4, 25)
		s.must(err, "SiTUGLU")
		ref := refSiTU(f64(av), f64(bv), 4, 25, s.rd)
		got := s.host(out, n, 70)
		s.close(fmt.Sprintf("SiTUGLU %d rows", n), got, ref, 70, s.tol(ref))
		s.roundedOutput("SiTUGLU", got, ref)
		s.free(a, b, out)
	}
}

// testSiTUFFN: a backend's fused FFN (ops.SiTUFFN, optional) equals the unfused ops bit for bit, for
// every tail row count and widths a device backend fuses (multiples of 8) or not (100); skipped for a
// backend without it.
func testSiTUFFN(s *suite) {
	fb, ok := s.b.(ops.SiTUFFN)
	if !ok {
		s.Skipf("backend %s has no fused SiTU FFN (ops.SiTUFFN)", s.b.Name())
	}
	const hidden = 64
	for _, width := range []int{96, 200, 100} {
		gate, _ := s.randWeight(width, hidden, 1/math.Sqrt(hidden))
		up, _ := s.randWeight(width, hidden, 1/math.Sqrt(hidden))
		down, _ := s.randWeight(hidden, width, 1/math.Sqrt(float64(width)))
		for _, n := range tailRows {
			x, _ := s.randAct(n, hidden, 1)
			what := fmt.Sprintf("SiTUFFN %d rows, width %d", n, width)
			fused, err := fb.SiTUFFN(x, gate, up, down, 4, 25)
			s.must(err, what)
			g, err := s.b.MatMul(x, gate)
			s.must(err, "MatMul gate")
			u, err := s.b.MatMul(x, up)
			s.must(err, "MatMul up")
			h, err := s.b.SiTUGLU(g, u, 4, 25)
			s.must(err, "SiTUGLU")
			y, err := s.b.MatMul(h, down)
			s.must(err, "MatMul down")
			s.same(what+" against the unfused ops", s.host(fused, n, hidden), s.host(y, n, hidden), hidden)
			s.free(x, fused, g, u, h, y)
		}
		s.free(gate, up, down)
	}
}

// testAttnResMixQuiet: a backend's mix without its weights (ops.QuietMixer, optional) equals AttnResMix's
// mix bit for bit, for 1, 2 and 9 vectors over every tail row count, at widths of the block-a-row kernel
// (1,104) and others (96, 7); skipped for a backend without it.
func testAttnResMixQuiet(s *suite) {
	qb, ok := s.b.(ops.QuietMixer)
	if !ok {
		s.Skipf("backend %s has no mix without weights (ops.QuietMixer)", s.b.Name())
	}
	for _, cols := range []int{1104, 96, 7} {
		wg, _ := s.weightF32(1, cols, s.normals(cols, 0.3))
		for _, n := range tailRows {
			for _, count := range []int{1, 2, 9} {
				vs, _ := s.mixVectors(n, cols, count)
				what := fmt.Sprintf("AttnResMixQuiet of %d over %d x %d", count, n, cols)
				quiet, err := qb.AttnResMixQuiet(vs, wg)
				s.must(err, what)
				mixed, _, err := s.b.AttnResMix(vs, wg)
				s.must(err, "AttnResMix")
				s.same(what+" against AttnResMix", s.host(quiet, n, cols), s.host(mixed, n, cols), cols)
				s.free(quiet, mixed)
				s.freeAll(vs)
			}
		}
		s.free(wg)
	}
	s.fails("AttnResMixQuiet of nothing", func() error {
		wg, _ := s.weightF32(1, 8, s.normals(8, 0.3))
		defer s.free(wg)
		_, err := qb.AttnResMixQuiet(nil, wg)
		return err
	})
}

// testAttnResMixNorm: a backend's fused mix and norm (ops.MixNormer, optional) equals AttnResMix then
// RMSNorm bit for bit, output and weights, quiet and with the weights, for 1, 2 and 9 vectors over every
// tail row count, at widths of a block a row (1,104), of a warp a row (96, 1,024) and others (7); skipped
// for a backend without it.
func testAttnResMixNorm(s *suite) {
	mn, ok := s.b.(ops.MixNormer)
	if !ok {
		s.Skipf("backend %s has no fused mix and norm (ops.MixNormer)", s.b.Name())
	}
	for _, cols := range []int{1104, 96, 1024, 7} {
		wg, _ := s.weightF32(1, cols, s.normals(cols, 0.3))
		w, _ := s.weightF32(1, cols, s.normals(cols, 1))
		for _, n := range tailRows {
			for _, count := range []int{1, 2, 9} {
				vs, _ := s.mixVectors(n, cols, count)
				mixed, wantP, err := s.b.AttnResMix(vs, wg)
				s.must(err, "AttnResMix")
				normed, err := s.b.RMSNorm(mixed, w, 1e-5)
				s.must(err, "RMSNorm")
				want := s.host(normed, n, cols)
				for _, weights := range []bool{false, true} {
					what := fmt.Sprintf("AttnResMixNorm of %d over %d x %d, weights %v", count, n, cols, weights)
					got, p, err := mn.AttnResMixNorm(vs, wg, w, 1e-5, weights)
					s.must(err, what)
					s.same(what+" against AttnResMix then RMSNorm", s.host(got, n, cols), want, cols)
					switch {
					case !weights && p != nil:
						s.Errorf("%s: %d weights, want none", what, len(p))
					case weights && len(p) != len(wantP):
						s.Errorf("%s: %d weights, want %d", what, len(p), len(wantP))
					case weights:
						s.same(what+": its weights against AttnResMix's", p, wantP, count)
					}
					s.free(got)
				}
				s.free(mixed, normed)
				s.freeAll(vs)
			}
		}
		s.free(wg, w)
	}
	s.fails("AttnResMixNorm of nothing", func() error {
		wg, _ := s.weightF32(1, 8, s.normals(8, 0.3))
		defer s.free(wg)
		_, _, err := mn.AttnResMixNorm(nil, wg, wg, 1e-5, false)
		return err
	})
}

// mixVectors returns count random n x cols activations for an AttnRes mix, with their values, of unequal
// norms (scales 0.5, 1.5, ...) so that the mix is not uniform.
func (s *suite) mixVectors(n, cols, count int) ([]ops.Tensor, [][]float64) {
	vs, vv := make([]ops.Tensor, count), make([][]float64, count)
	for i := range vs {
		vs[i], vv[i] = s.randAct(n, cols, 0.5+float64(i))
	}
	return vs, vv
}
