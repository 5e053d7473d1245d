package opstest

import (
	"fmt"
	"math"
	"slices"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// moeTests cover the router and the routed experts.
var moeTests = []test{
	{"Route", testRoute},
	{"RouteTies", testRouteTies},
	{"QueueRoute", testQueueRoute},
	{"ExpertsAccumulate", testExperts},
	{"MXFP4Golden", testMXFP4Golden},
	{"MXFP4Refused", testMXFP4Refused},
}

// testRoute: ids and weights against the float64 router; a different id is accepted only at a near-tie of
// biased scores (float32 against float64 may order those either way).
func testRoute(s *suite) {
	const cols, experts, k, scale = 64, 48, 6, 2.5
	for _, n := range tailRows {
		x, xv := s.randAct(n, cols, 1)
		w, wv := s.randWeight(experts, cols, 0.125)
		bias, bv := s.weightF32(1, experts, s.normals(experts, 0.05))
		rt, err := s.b.Route(x, w, bias, k, scale)
		s.must(err, "Route")
		what := fmt.Sprintf("Route %d rows", n)
		if rt.K != k || len(rt.IDs) != n*k || len(rt.Weights) != n*k {
			s.Fatalf("%s: K %d with %d ids and %d weights, want %d, %d, %d", what, rt.K, len(rt.IDs), len(rt.Weights), k, n*k, n*k)
		}
		ids, ws, biased := refRoute(xv, wv, bv, n, cols, experts, k, scale)
		var refW []float64
		for r := range n {
			for j, want := range ids[r] {
				got := int(rt.IDs[r*k+j])
				if got < 0 || got >= experts || slices.Contains(rt.IDs[r*k:r*k+j], int32(got)) {
					s.Errorf("%s: row %d position %d: id %d is out of range or repeated (%v)", what, r, j, got, rt.IDs[r*k:(r+1)*k])
				} else if got != want && math.Abs(biased[r][got]-biased[r][want]) > 1e-5 {
					s.Errorf("%s: row %d position %d: id %d (biased score %.9g), want %d (%.9g)", what, r, j, got, biased[r][got], want, biased[r][want])
				}
			}
			refW = append(refW, ws[r]...)
		}
		s.close(what+" weights", rt.Weights, refW, k, tol{abs: 1e-6, rel: 1e-5}) // float32 in both precisions
		s.free(x, w, bias)
	}
	x, _ := s.randAct(2, cols, 1)
	w, _ := s.randWeight(experts, cols, 0.125)
	bias, _ := s.weightF32(1, experts, s.normals(experts, 0.05))
	s.fails("Route with k = 0", func() error { _, err := s.b.Route(x, w, bias, 0, 1); return err })
	s.free(x, w, bias)
}

// testRouteTies: exact ties of the biased score go to the lower id, in the chosen order too.
func testRouteTies(s *suite) {
	const cols, experts, k = 16, 8, 4
	row := s.normals(cols, 0.25)
	wv := make([]float32, 0, experts*cols)
	for range experts {
		wv = append(wv, row...) // identical router rows: every expert gets the same s
	}
	w, _ := s.weightBF16(experts, cols, wv)
	bias, _ := s.weightF32(1, experts, []float32{0, 0.5, 0.25, 0.5, 0.25, 0.5, 0, 0.25})
	x, _ := s.randAct(3, cols, 1)
	rt, err := s.b.Route(x, w, bias, k, 1)
	s.must(err, "Route")
	want := []int32{1, 3, 5, 2} // the three 0.5s by id, then the first 0.25
	for r := range 3 {
		if got := rt.IDs[r*k : (r+1)*k]; !slices.Equal(got, want) {
			s.Errorf("row %d: ids %v, want %v (ties to the lower id)", r, got, want)
		}
		for j, wt := range rt.Weights[r*k : (r+1)*k] {
			if math.Abs(float64(wt)-0.25) > 1e-6 {
				s.Errorf("row %d position %d: weight %.9g, want 0.25 (equal scores)", r, j, wt)
			}
		}
	}
	zero, _ := s.weightF32(1, experts, make([]float32, experts))
	all, err := s.b.Route(x, w, zero, experts, 1)
	s.must(err, "Route")
	for r := range 3 {
		if got := all.IDs[r*experts : (r+1)*experts]; !slices.Equal(got, []int32{0, 1, 2, 3, 4, 5, 6, 7}) {
			s.Errorf("all tied, row %d: ids %v, want ascending", r, got)
		}
	}
	s.free(x, w, bias, zero)
}

// testQueueRoute (backends with ops.RouteQueuer): a queued routing waited for after other ops equals
// Route's, bit for bit, with those ops' results unchanged; two pending at once, waited for in either
// order; a second Wait returns the first's result; bad arguments fail at QueueRoute.
func testQueueRoute(s *suite) {
	q, ok := s.b.(ops.RouteQueuer)
	if !ok {
		s.Skipf("backend %s has no QueueRoute (ops.RouteQueuer)", s.b.Name())
	}
	const cols, experts, k, scale = 64, 48, 6, 2.5
	w, _ := s.randWeight(experts, cols, 0.125)
	bias, _ := s.weightF32(1, experts, s.normals(experts, 0.05))
	up, _ := s.randWeight(40, cols, 1/math.Sqrt(cols))
	for _, n := range append([]int{0}, tailRows...) {
		x, _ := s.randAct(n, cols, 1)
		y, _ := s.randAct(n+3, cols, 1)
		want, err := s.b.Route(x, w, bias, k, scale)
		s.must(err, "Route")
		wantY, err := s.b.Route(y, w, bias, k, scale)
		s.must(err, "Route")
		wantUp, err := s.b.MatMul(x, up)
		s.must(err, "MatMul")
		for _, reverse := range []bool{false, true} {
			what := fmt.Sprintf("QueueRoute over %d rows (two pending, the second waited for first: %v)", n, reverse)
			px, err := q.QueueRoute(x, w, bias, k, scale)
			s.must(err, what)
			between, err := s.b.MatMul(x, up) // queued while the routing is pending
			s.must(err, what+": MatMul")
			py, err := q.QueueRoute(y, w, bias, k, scale)
			s.must(err, what)
			first, second := px, py
			if reverse {
				first, second = py, px
			}
			_, err = first.Wait()
			s.must(err, what+": Wait")
			_, err = second.Wait()
			s.must(err, what+": Wait")
			for _, c := range []struct {
				name string
				p    ops.PendingRouting
				want ops.Routing
			}{{"x", px, want}, {"y", py, wantY}} {
				for range 2 { // a second Wait returns the first's result
					got, err := c.p.Wait()
					s.must(err, what+": Wait")
					if got.K != c.want.K || !slices.Equal(got.IDs, c.want.IDs) || !slices.Equal(got.Weights, c.want.Weights) {
						s.Errorf("%s: routing of %s differs from Route's", what, c.name)
					}
				}
			}
			s.same(what+": the MatMul queued between", s.host(between, n, 40), s.host(wantUp, n, 40), 40)
			s.free(between)
		}
		s.free(x, y, wantUp)
	}
	x, _ := s.randAct(2, cols, 1)
	s.fails("QueueRoute with k = 0", func() error { _, err := q.QueueRoute(x, w, bias, 0, 1); return err })
	s.fails("QueueRoute with k = 49 of 48 experts", func() error { _, err := q.QueueRoute(x, w, bias, experts+1, 1); return err })
	s.free(x, w, bias, up)
}

// randRouting picks k distinct experts of n per row with weights in (0, 1).
func (s *suite) randRouting(rows, k, n int) ops.Routing {
	rt := ops.Routing{K: k, IDs: make([]int32, rows*k), Weights: make([]float32, rows*k)}
	for r := range rows {
		for j, e := range s.rng.Perm(n)[:k] {
			rt.IDs[r*k+j] = int32(e)
			rt.Weights[r*k+j] = float32(0.05 + 0.9*s.rng.Float64())
		}
	}
	return rt
}

// testExperts: accumulation into a non-zero acc against the reference, experts given out of order, rows
// that chose experts not given, and disjoint ascending subsets equal to one call bit for bit.
func testExperts(s *suite) {
	const latent, ffn, total, k, beta, linBeta = 64, 96, 8, 3, 4, 25
	given := []int{5, 0, 7, 2, 1, 4} // out of order; 3 and 6 are chosen by some rows but not given
	es := make([]expert, 0, len(given))
	for _, id := range given {
		es = append(es, s.randExpert(id, latent, ffn))
	}
	up := make([]ops.Expert, len(es))
	for i, e := range es {
		up[i] = s.upload(e)
	}
	byID := func(ids ...int) []ops.Expert {
		var out []ops.Expert
		for _, id := range ids {
			out = append(out, up[slices.Index(given, id)])
		}
		return out
	}
	for _, n := range []int{1, 65, 129} {
		z, zv := s.randAct(n, latent, 1)
		accv := s.normals(n*latent, 0.1)
		rt := s.randRouting(n, k, total)
		what := fmt.Sprintf("ExpertsAccumulate %d rows", n)
		acc := s.act(n, latent, accv)
		s.must(s.b.ExpertsAccumulate(acc, z, rt, up, beta, linBeta), what)
		got := s.host(acc, n, latent)
		ref := refExperts(f64(accv), zv, n, latent, rt.IDs, rt.Weights, k, es, beta, linBeta, s.rd)
		// three rounding points in a chain (W1 z and W3 z, SiTU, W2 h) before an unrounded sum
		s.close(what, got, ref, latent, s.tol(ref).scaled(4))
		s.normRoundsInput(what, acc)
		// Gather copies an accumulator's float32 rows exactly (an expert-major layer takes a slice's rows
		// of a pooled call's accumulator so: replay/model/moe_pool.go)
		lo := n / 3
		ids := make([]int32, n-lo)
		for i := range ids {
			ids[i] = int32(lo + i)
		}
		rows, err := s.b.Gather(acc, ids)
		s.must(err, "Gather of an accumulator")
		s.same(fmt.Sprintf("%s: Gather of rows %d..%d of the accumulator", what, lo, n-1), s.host(rows, n-lo, latent), got[lo*latent:], latent)
		s.free(rows)
		for _, split := range [][][]int{{{0, 1, 2}, {4, 5, 7}}, {{0}, {1, 2, 4}, {5, 7}}} {
			acc2 := s.act(n, latent, accv)
			for _, part := range split {
				s.must(s.b.ExpertsAccumulate(acc2, z, rt, byID(part...), beta, linBeta), what)
			}
			s.same(fmt.Sprintf("%s: subsets %v vs one call", what, split), s.host(acc2, n, latent), got, latent)
			s.free(acc2)
		}
		s.free(z, acc)
	}
	// One expert per row with weight 1 into a zero acc: acc is then the expert's output itself, rounded in
	// BF16, so its rounding points can be checked exactly (the tolerance above cannot see a skipped one).
	n := 65
	z, zv := s.randAct(n, latent, 1)
	rt := s.randRouting(n, 1, total)
	for i := range rt.Weights {
		rt.Weights[i] = 1
	}
	acc, err := s.b.Zeros(n, latent)
	s.must(err, "Zeros")
	s.must(s.b.ExpertsAccumulate(acc, z, rt, up, beta, linBeta), "ExpertsAccumulate")
	got := s.host(acc, n, latent)
	ref := refExperts(make([]float64, n*latent), zv, n, latent, rt.IDs, rt.Weights, 1, es, beta, linBeta, s.rd)
	s.close("one expert per row, weight 1", got, ref, latent, s.tol(ref).scaled(4))
	s.roundedOutput("one expert per row, weight 1", got, ref)
	s.free(z, acc)
	for _, e := range up {
		s.b.Free(e)
	}
}

// testMXFP4Golden decodes the public golden row through UploadExpert and ExpertsAccumulate: w1 row 0 is
// the golden row, w3 is all ones, w2 the identity, and z the one-hot rows e_0..e_15, so output j at
// column 0 is rounded(situ(w1[0,j], 1)). The other outputs are checked against the suite's decoder.
func testMXFP4Golden(s *suite) {
	const n, beta, linBeta = 32, 4, 25 // latent = ffn = 32: one scale group per row
	codes1, scales1 := make([]byte, n*n), make([]byte, n)
	for i := range codes1 {
		codes1[i] = byte(s.rng.IntN(16))
	}
	for i := range scales1 {
		scales1[i] = byte(120 + s.rng.IntN(4))
	}
	copy(codes1, goldenCodes)
	scales1[0] = goldenScale
	ones, identity, unit := make([]byte, n*n), make([]byte, n*n), make([]byte, n)
	for i := range n {
		unit[i] = 127 // 2^0
		for j := range n {
			ones[i*n+j] = 2 // E2M1 1.0
			if i == j {
				identity[i*n+j] = 2
			}
		}
	}
	e := expert{id: 3, w1: newMXFP4(n, n, codes1, scales1), w3: newMXFP4(n, n, ones, unit), w2: newMXFP4(n, n, identity, unit)}
	x := s.upload(e)
	zv := make([]float32, 16*n)
	rt := ops.Routing{K: 1, IDs: make([]int32, 16), Weights: make([]float32, 16)}
	for j := range 16 {
		zv[j*n+j] = 1
		rt.IDs[j], rt.Weights[j] = 3, 1
	}
	z := s.act(16, n, zv)
	acc, err := s.b.Zeros(16, n)
	s.must(err, "Zeros")
	s.must(s.b.ExpertsAccumulate(acc, z, rt, []ops.Expert{x}, beta, linBeta), "ExpertsAccumulate")
	got := s.host(acc, 16, n)
	col0, want := make([]float32, 16), make([]float64, 16)
	for j := range 16 {
		col0[j] = got[j*n]
		want[j] = refSiTU([]float64{goldenRow[j]}, []float64{1}, beta, linBeta, s.rd)[0]
	}
	s.close("golden row through the expert (rounded(situ(w1[0,j], 1)))", col0, want, 0, tol{abs: 1e-9, rel: s.eps()})
	ref := refExperts(make([]float64, 16*n), f64(zv), 16, n, rt.IDs, rt.Weights, 1, []expert{e}, beta, linBeta, s.rd)
	s.close("the rest of the golden expert", got, ref, n, s.tol(ref).scaled(2))
	s.free(x, z, acc)
}

// testMXFP4Refused: scale byte 255 (NaN in the OCP spec) and byte counts that do not fit are errors.
func testMXFP4Refused(s *suite) {
	const latent, ffn = 32, 64
	e := s.randExpert(0, latent, ffn)
	bad := append([]byte(nil), e.w2.scales...)
	bad[len(bad)-1] = 255
	s.fails("UploadExpert with a w2 scale byte 255", func() error {
		x, err := s.b.UploadExpert(0, latent, ffn, e.w1.packed, e.w1.scales, e.w3.packed, e.w3.scales, e.w2.packed, bad)
		s.b.Free(x)
		return err
	})
	bad1 := append([]byte(nil), e.w1.scales...)
	bad1[0] = 255
	s.fails("UploadExpert with a w1 scale byte 255", func() error {
		x, err := s.b.UploadExpert(0, latent, ffn, e.w1.packed, bad1, e.w3.packed, e.w3.scales, e.w2.packed, e.w2.scales)
		s.b.Free(x)
		return err
	})
	s.fails("UploadExpert with a short w3", func() error {
		x, err := s.b.UploadExpert(0, latent, ffn, e.w1.packed, e.w1.scales, e.w3.packed[1:], e.w3.scales, e.w2.packed, e.w2.scales)
		s.b.Free(x)
		return err
	})
}

// normRoundsInput: RMSNorm rounds its input as it reads it, so an accumulator's float32 sums normed as they
// are give the bits of their rounded copy normed (the model norms the routed experts' sum so, with no
// Round of its own).
func (s *suite) normRoundsInput(what string, acc ops.Tensor) {
	s.Helper()
	wv := make([]float32, acc.Cols())
	for i := range wv {
		wv[i] = float32(1 + 0.5*s.rng.NormFloat64())
	}
	w, _ := s.weightBF16(1, acc.Cols(), wv)
	direct, err := s.b.RMSNorm(acc, w, 1e-5)
	s.must(err, what+": RMSNorm of the accumulator")
	r, err := s.b.Round(acc)
	s.must(err, what+": Round of the accumulator")
	viaRound, err := s.b.RMSNorm(r, w, 1e-5)
	s.must(err, what+": RMSNorm of the rounded accumulator")
	if fmt.Sprint(s.hostBits(direct)) != fmt.Sprint(s.hostBits(viaRound)) {
		s.Errorf("%s: RMSNorm of the accumulator differs from RMSNorm of its rounded copy", what)
	}
	s.free(w, direct, r, viaRound)
}
