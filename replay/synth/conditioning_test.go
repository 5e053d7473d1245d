package synth

import (
	"math"
	"slices"
	"sort"
	"testing"

	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
)

// These tests check the construction's invariants in float64 on the weights as written (bf16 decoded),
// without a forward pass: the router's top-k is the token's code with a wide margin for any plausible
// mix of embedding and context, and the embedding alone predicts its first successor with a clear gap.
// The end-to-end figures (bf16 vs fp32 of a whole forward) come from k3_ref; doc.go lists them.

// matrix fills tensor s and decodes it to float64 rows.
func matrix(t *testing.T, b *builder, s checkpoint.Spec) [][]float64 {
	t.Helper()
	raw := fillAll(t, b, s)
	n, rowBytes := rows(s)
	cols := int(rowBytes / s.DType.Size())
	f := make([]float32, n*cols)
	bf16.Decode(f, raw)
	out := make([][]float64, n)
	for r := range out {
		out[r] = make([]float64, cols)
		for c := range cols {
			out[r][c] = float64(f[r*cols+c])
		}
	}
	return out
}

func spec(name string, shape ...int) checkpoint.Spec {
	s := checkpoint.Spec{Name: name, DType: checkpoint.BF16}
	for _, d := range shape {
		s.Shape = append(s.Shape, int64(d))
	}
	return s
}

func tinyBuilder(t *testing.T) (*builder, model.Dims) {
	t.Helper()
	p, _ := LookupPreset("tiny")
	l, err := NewLayout(p, 0, 11)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newBuilder(l.Plan, 11, p.numBPE)
	if err != nil {
		t.Fatal(err)
	}
	return b, l.Plan.Dims()
}

// rmsNormed returns x / rms(x).
func rmsNormed(x []float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	r := math.Sqrt(ss / float64(len(x)))
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v / r
	}
	return out
}

// TestRouterMargin mixes each token's embedding (weight w0 in 0.3..0.9) with a random context vector of
// comparable norm that, like every sublayer output, is zero in the reserved dims; then checks that the
// selected experts are exactly the token's code slots and that the k-th selection score beats the
// (k+1)-th by a wide margin.
func TestRouterMargin(t *testing.T) {
	b, d := tinyBuilder(t)
	const layer = 4
	emb := matrix(t, b, spec(model.TextPrefix+"embed_tokens.weight", d.Vocab, d.Hidden))
	gate := matrix(t, b, spec(model.LayerPrefix(layer)+"block_sparse_moe.gate.weight", d.Experts, d.Hidden))
	slots := b.routerSlots(layer)
	g := stream(1, 0)
	minGap := math.Inf(1)
	for tok := 0; tok < d.Vocab; tok += 7 {
		w0 := 0.3 + 0.6*g.uniform()
		h := make([]float64, d.Hidden)
		for i := range h {
			h[i] = w0 * emb[tok][i]
			if i > b.codeDims {
				h[i] += (1 - w0) * g.gaussian()
			}
		}
		x := rmsNormed(h)
		type scored struct {
			e int
			s float64
		}
		sc := make([]scored, d.Experts)
		for e, row := range gate {
			var z float64
			for i, w := range row {
				z += w * x[i]
			}
			sc[e] = scored{e, 1/(1+math.Exp(-z)) + float64(b.t.biasSpread)} // worst-case bias
		}
		sort.Slice(sc, func(i, j int) bool { return sc[i].s > sc[j].s })
		var got, want []int
		for _, s := range sc[:d.TopK] {
			got = append(got, s.e)
		}
		for e, j := range slots {
			if j%b.groupSize == b.codeSlot(tok, j/b.groupSize) {
				want = append(want, e)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("token %d: experts %v, its code says %v", tok, got, want)
		}
		minGap = min(minGap, sc[d.TopK-1].s-sc[d.TopK].s)
	}
	// Both sides got the same worst-case bias; a real bias moves each side by at most biasSpread.
	if minGap < 4*b.t.biasSpread {
		t.Errorf("smallest selection gap %.3f, want above 4 x the bias spread %.3f", minGap, b.t.biasSpread)
	}
	t.Logf("smallest gap between the k-th and (k+1)-th selection score: %.3f", minGap)
}

// TestSuccessorLogits reads each token's embedding alone through the final norm and lm_head (as the
// output mix would if it were all embedding) and checks that the first successor is the top-1 with a
// clear gap, and that the entropy varies across tokens.
func TestSuccessorLogits(t *testing.T) {
	b, d := tinyBuilder(t)
	emb := matrix(t, b, spec(model.TextPrefix+"embed_tokens.weight", d.Vocab, d.Hidden))
	lm := matrix(t, b, spec(model.LMHeadName, d.Vocab, d.Hidden))
	var gaps, ents []float64
	wrong := 0
	for tok := 0; tok < b.numBPE; tok += 11 {
		x := rmsNormed(emb[tok])
		for i := range x {
			x[i] *= b.t.qOut // the embedding's scale in the final normed state
		}
		logits := make([]float64, d.Vocab)
		best, second := -1, -1
		for v, row := range lm {
			var z float64
			for i, w := range row {
				z += w * x[i]
			}
			logits[v] = z
			switch {
			case best < 0 || z > logits[best]:
				best, second = v, best
			case second < 0 || z > logits[second]:
				second = v
			}
		}
		ids, _ := b.successors(tok)
		if best != ids[0] {
			wrong++
		}
		gaps = append(gaps, logits[best]-logits[second])
		var lse float64
		for _, z := range logits {
			lse += math.Exp(z - logits[best])
		}
		lse = logits[best] + math.Log(lse)
		var ent float64
		for _, z := range logits {
			p := math.Exp(z - lse)
			ent -= p * (z - lse)
		}
		ents = append(ents, ent)
	}
	slices.Sort(gaps)
	slices.Sort(ents)
	n := len(gaps)
	t.Logf("%d tokens: top-1 is not the first successor for %d; top-1 gap p1 %.2f p50 %.2f; entropy p10 %.2f p50 %.2f p90 %.2f",
		n, wrong, gaps[n/100], gaps[n/2], ents[n/10], ents[n/2], ents[9*n/10])
	if wrong > n/100 {
		t.Errorf("%d of %d tokens do not predict their first successor", wrong, n)
	}
	if gaps[n/100] < 0.3 {
		t.Errorf("top-1 gap at the 1st percentile %.3f, want >= 0.3 nats", gaps[n/100])
	}
	if ents[9*n/10]-ents[n/10] < 1.5 {
		t.Errorf("entropy hardly varies: p10 %.2f p90 %.2f", ents[n/10], ents[9*n/10])
	}
	if ents[n/2] > math.Log(float64(d.Vocab))-2 {
		t.Errorf("median entropy %.2f is near uniform (%.2f)", ents[n/2], math.Log(float64(d.Vocab)))
	}
}
