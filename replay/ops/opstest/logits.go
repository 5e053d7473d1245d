package opstest

import (
	"fmt"
	"math"
	"slices"
)

// logitTests cover TokenStats.
var logitTests = []test{
	{"TokenStats", testTokenStats},
	{"TokenStatsTies", testTokenStatsTies},
	{"TokenStatsUniform", testTokenStatsUniform},
	{"TokenStatsRounding", testTokenStatsRounding},
}

// testTokenStats: random logits against a full float64 log-softmax. Rank and top ids are checked up to
// near-ties of the logits (float32 and float64 sums may round a logit to neighbouring values).
func testTokenStats(s *suite) {
	const cols, vocab, k = 48, 1000, 5
	w, wv := s.randWeight(vocab, cols, 0.5)
	for _, n := range []int{1, 33, 65} { // 33 and 65 cross chunks of 32 and 64 rows
		h, hv := s.randAct(n, cols, 1)
		targets := make([]int32, n)
		for i := range targets {
			targets[i] = int32(s.rng.IntN(vocab))
		}
		targets[0] = -1 // no target
		st, err := s.b.TokenStats(h, w, targets, k)
		s.must(err, "TokenStats")
		what := fmt.Sprintf("TokenStats %d rows", n)
		if len(st) != n {
			s.Fatalf("%s: %d results", what, len(st))
		}
		ref := refTokenStats(hv, wv, n, cols, vocab, targets, s.rd)
		var gotLP, gotH, gotTop []float32
		var refLP, refH, refTop []float64
		for r, g := range st {
			rf := ref[r]
			// a logit may be one rounding off: delta bounds how far
			delta := s.eps() * (math.Abs(rf.logits[rf.order[0]]) + rms(rf.logits))
			gotH, refH = append(gotH, g.Entropy), append(refH, rf.entropy)
			if t := targets[r]; t < 0 {
				if g.Logprob != 0 || g.Rank != 0 {
					s.Errorf("%s: row %d has no target but logprob %g, rank %d (want 0, 0)", what, r, g.Logprob, g.Rank)
				}
			} else {
				gotLP, refLP = append(gotLP, g.Logprob), append(refLP, rf.logp[t])
				lo, hi := 1, 1
				for _, l := range rf.logits {
					if l > rf.logits[t]+delta {
						lo++
					}
					if l > rf.logits[t]-delta {
						hi++
					}
				}
				if int(g.Rank) < lo || int(g.Rank) > hi {
					s.Errorf("%s: row %d: rank %d, want %d (between %d and %d allowing near-ties)", what, r, g.Rank, rf.rank, lo, hi)
				}
			}
			if len(g.TopIDs) != k || len(g.TopLogp) != k {
				s.Errorf("%s: row %d: %d top ids and %d logprobs, want %d", what, r, len(g.TopIDs), len(g.TopLogp), k)
				continue
			}
			kth := rf.logits[rf.order[k-1]]
			for j, id := range g.TopIDs {
				switch {
				case id < 0 || int(id) >= vocab || slices.Contains(g.TopIDs[:j], id):
					s.Errorf("%s: row %d: top ids %v out of range or repeated", what, r, g.TopIDs)
				case rf.logits[id] < kth-delta:
					s.Errorf("%s: row %d: top id %d has logit %.6g below the k-th largest %.6g", what, r, id, rf.logits[id], kth)
				case j > 0 && rf.logits[id] > rf.logits[g.TopIDs[j-1]]+delta:
					s.Errorf("%s: row %d: top ids %v not in descending order", what, r, g.TopIDs)
				default:
					gotTop, refTop = append(gotTop, g.TopLogp[j]), append(refTop, rf.logp[id])
				}
			}
		}
		// logprobs are differences of logits of size up to ~10 with the lse: the logits' tolerance, absolute
		s.close(what+" logprob", gotLP, refLP, 0, tol{abs: 2 * s.eps() * rms(refLP), rel: s.eps()})
		s.close(what+" top logprobs", gotTop, refTop, k, tol{abs: 2 * s.eps() * rms(refTop), rel: s.eps()})
		s.close(what+" entropy", gotH, refH, 0, tol{abs: 2 * s.eps() * rms(refH), rel: s.eps()})
		s.free(h)
	}
	s.free(w)
}

// testTokenStatsTies: logits that are exact in every precision (small integers over 4), so rank counts
// only strictly larger logits and the top k of equal logits come in ascending id.
func testTokenStatsTies(s *suite) {
	const cols, vocab, k = 2, 64, 6
	wv := make([]float32, vocab*cols)
	for v := range vocab {
		wv[v*cols] = float32(v%5) / 4 // logits of h = (1, 0): 0, .25, .5, .75, 1 repeating: many ties
		wv[v*cols+1] = float32(s.rng.IntN(9)-4) / 4
	}
	w, wexact := s.weightBF16(vocab, cols, wv)
	h := s.act(2, cols, []float32{1, 0, 2, 1})
	targets := []int32{9, 3} // row 0: logit 1 at id 4, 9, 14, ...; row 1: some logit with ties around it
	st, err := s.b.TokenStats(h, w, targets, k)
	s.must(err, "TokenStats")
	ref := refTokenStats([]float64{1, 0, 2, 1}, wexact, 2, cols, vocab, targets, func(x float64) float64 { return x })
	for r := range 2 {
		rf, g := ref[r], st[r]
		if int(g.Rank) != rf.rank {
			s.Errorf("row %d: rank %d, want %d (1 + strictly larger logits)", r, g.Rank, rf.rank)
		}
		want := make([]int32, k)
		for j := range k {
			want[j] = int32(rf.order[j])
		}
		if !slices.Equal(g.TopIDs, want) {
			s.Errorf("row %d: top ids %v, want %v (equal logits in ascending id)", r, g.TopIDs, want)
		}
		s.close(fmt.Sprintf("row %d logprob", r), []float32{g.Logprob}, []float64{rf.logp[targets[r]]}, 0, tol{abs: 1e-6, rel: 1e-6})
		s.close(fmt.Sprintf("row %d entropy", r), []float32{g.Entropy}, []float64{rf.entropy}, 0, tol{abs: 1e-6, rel: 1e-6})
	}
	if st[0].Rank != 1 {
		s.Errorf("row 0: the target has the largest logit (tied): rank %d, want 1", st[0].Rank)
	}
	s.free(w, h)
}

// testTokenStatsUniform: equal logits give entropy log V, logprob -log V, rank 1 and top ids 0..k-1.
func testTokenStatsUniform(s *suite) {
	const cols, vocab, k = 32, 3000, 4
	row := s.normals(cols, 0.2)
	wv := make([]float32, 0, vocab*cols)
	for range vocab {
		wv = append(wv, row...)
	}
	w, _ := s.weightBF16(vocab, cols, wv)
	h, _ := s.randAct(3, cols, 1)
	st, err := s.b.TokenStats(h, w, []int32{0, 2999, 1234}, k)
	s.must(err, "TokenStats")
	logV := math.Log(vocab)
	for r, g := range st {
		s.close(fmt.Sprintf("row %d: entropy of a uniform row", r), []float32{g.Entropy}, []float64{logV}, 0, tol{rel: 1e-6})
		s.close(fmt.Sprintf("row %d: logprob of a uniform row", r), []float32{g.Logprob}, []float64{-logV}, 0, tol{rel: 1e-6})
		s.close(fmt.Sprintf("row %d: top logprobs", r), g.TopLogp, []float64{-logV, -logV, -logV, -logV}, 0, tol{rel: 1e-6})
		if g.Rank != 1 || !slices.Equal(g.TopIDs, []int32{0, 1, 2, 3}) {
			s.Errorf("row %d: rank %d and top ids %v, want 1 and [0 1 2 3]", r, g.Rank, g.TopIDs)
		}
	}
	s.free(w, h)
}

// testTokenStatsRounding: the logits are rounded before the statistics in BF16 and not in FP32. Id 1 has
// the logit 1 + 2^-9, exact in float32 but a quarter bfloat16 ulp above 1, which it rounds to: in BF16 it
// ties id 0 (logit 1), so id 0 ranks first and leads the top k; in FP32 id 1 is strictly larger.
func testTokenStatsRounding(s *suite) {
	w, _ := s.weightBF16(3, 2, []float32{1, 0, 1, 0x1p-9, -1, 0})
	h := s.act(1, 2, []float32{1, 1})
	st, err := s.b.TokenStats(h, w, []int32{0}, 2)
	s.must(err, "TokenStats")
	wantRank, wantTop := int32(2), []int32{1, 0}
	if s.bf {
		wantRank, wantTop = 1, []int32{0, 1}
	}
	if st[0].Rank != wantRank || !slices.Equal(st[0].TopIDs, wantTop) {
		s.Errorf("rank %d and top ids %v, want %d and %v: the logits must be rounded in bf16 only",
			st[0].Rank, st[0].TopIDs, wantRank, wantTop)
	}
}
