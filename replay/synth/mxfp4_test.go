package synth

import (
	"math"
	"testing"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
)

// TestCodeTable checks that the sampled codes have the target standard deviation and both zeros.
func TestCodeTable(t *testing.T) {
	for _, std := range []float64{0.6, 1.0, 1.5, 2.3} {
		tab := newCodeTable(std)
		var v float64
		var negZero bool
		for _, c := range tab {
			m := e2m1Mag[c&7]
			v += m * m
			negZero = negZero || c == 8
		}
		got := math.Sqrt(v / float64(len(tab)))
		if math.Abs(got-std) > 0.01*std {
			t.Errorf("target %g: codes have std %g", std, got)
		}
		if !negZero && std < 2 {
			t.Errorf("target %g: no -0 code", std)
		}
	}
}

// TestExpertStatistics decodes one expert matrix of each kind with the reader's decoder and checks its
// standard deviation, mean, the spread of its scales, and that w1's packed and scale fillers agree on
// which groups are coarse (an odd code is impossible under a scale that was not chosen for it).
func TestExpertStatistics(t *testing.T) {
	p, _ := LookupPreset("small")
	l, err := NewLayout(p, 0, 5)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newBuilder(l.Plan, 5, p.numBPE)
	if err != nil {
		t.Fatal(err)
	}
	d := l.Plan.Dims()
	for _, tc := range []struct {
		mat        string
		rows, cols int
		std        float64
	}{
		{"w1", d.ExpertFFN, d.Latent, 1 / math.Sqrt(float64(d.Latent))},
		{"w3", d.ExpertFFN, d.Latent, 1 / math.Sqrt(float64(d.Latent))},
		{"w2", d.Latent, d.ExpertFFN, 1 / (situRMS * math.Sqrt(float64(d.ExpertFFN)))},
	} {
		pre := model.ExpertPrefix(2, 9) + tc.mat + "."
		packed := fillAll(t, b, checkpoint.Spec{Name: pre + "weight_packed", DType: checkpoint.U8, Shape: []int64{int64(tc.rows), int64(tc.cols / 2)}})
		scales := fillAll(t, b, checkpoint.Spec{Name: pre + "weight_scale", DType: checkpoint.U8, Shape: []int64{int64(tc.rows), int64(tc.cols / 32)}})
		vals := make([]float32, tc.rows*tc.cols)
		if err := checkpoint.DecodeMXFP4(vals, packed, scales, tc.rows, tc.cols); err != nil {
			t.Fatalf("%s: %v", tc.mat, err)
		}
		var s, ss float64
		for _, v := range vals {
			s += float64(v)
			ss += float64(v) * float64(v)
		}
		n := float64(len(vals))
		mean, std := s/n, math.Sqrt(ss/n)
		if math.Abs(std-tc.std) > 0.02*tc.std || math.Abs(mean) > 5*tc.std/math.Sqrt(n) { // 5 standard errors
			t.Errorf("%s: mean %g std %g, want 0 and %g", tc.mat, mean, std, tc.std)
		}
		lo, hi := scales[0], scales[0]
		for _, sc := range scales {
			lo, hi = min(lo, sc), max(hi, sc)
		}
		if hi != lo+1 {
			t.Errorf("%s: scales span %d..%d, want two neighbouring exponents", tc.mat, lo, hi)
		}
	}
}

// fillAll fills a whole tensor with the builder's filler.
func fillAll(t *testing.T, b *builder, s checkpoint.Spec) []byte {
	t.Helper()
	f, err := b.filler(s)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := rows(s)
	out := make([]byte, s.Bytes())
	f.fill(out, 0, n)
	return out
}
