package replay

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// golden is the JSON k3_ref/write_goldens.py writes (k3_ref/README.md has the schema).
type golden struct {
	Precision   string `json:"precision"`
	TopK        int    `json:"top_k"`
	NumLayers   int    `json:"num_layers"`
	MoELayers   []int  `json:"moe_layers"`
	HiddenShape []int  `json:"hidden_shape"`
	Sequences   []struct {
		IDs          []int32     `json:"ids"`
		Logprob      []float64   `json:"logprob"`
		Entropy      []float64   `json:"entropy"`
		TopKIDs      [][]int32   `json:"topk_ids"`
		TopKLogprobs [][]float64 `json:"topk_logprobs"`
		Router       [][][]int32 `json:"router"`
	} `json:"sequences"`
}

func readGolden(t *testing.T, dir, precision string) *golden {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "golden-"+precision+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatalf("golden %s: %v", dir, err)
	}
	return &g
}

// agreement is how two replays of the same sequences compare: positions counts every position (top-1),
// scored those with a next token (log-probabilities), routed the (position, MoE layer) pairs.
type agreement struct {
	positions, top1Same int
	scored              int
	sumAbs, maxAbs      float64
	routed, routeDiff   int
}

func (a agreement) top1() float64    { return float64(a.top1Same) / float64(a.positions) }
func (a agreement) meanAbs() float64 { return a.sumAbs / float64(a.scored) }
func (a agreement) flips() float64 {
	if a.routed == 0 {
		return 0
	}
	return float64(a.routeDiff) / float64(a.routed)
}

// criteria bound an agreement: top-1 agreement at least top1, mean |delta logprob| at most meanAbs nats,
// the share of differing expert sets at most flips.
type criteria struct{ top1, meanAbs, flips float64 }

// Criteria of the golden tests: fp32 replays agree with k3_ref to float32 round-off, so their outputs
// and routing match all but exactly; bf16 ones are held to the project's agreement standard.
var (
	fp32Golden = criteria{top1: 0.999, meanAbs: 1e-4, flips: 0.001}
	bf16Golden = criteria{top1: 0.99, meanAbs: 0.02, flips: 0.02}
)

// check fails t unless a compared some positions and meets c; written so that a NaN fails too.
func (a agreement) check(t *testing.T, label string, c criteria) {
	t.Helper()
	if a.positions == 0 || a.scored == 0 {
		t.Errorf("%s: nothing compared (%d positions, %d with a next token)", label, a.positions, a.scored)
		return
	}
	if !(a.top1() >= c.top1) || !(a.meanAbs() <= c.meanAbs) || !(a.flips() <= c.flips) {
		t.Errorf("%s: top-1 %.4f (want >= %g), mean |dlogprob| %.3g (want <= %g), expert sets differing %.4f of %d (want <= %g)",
			label, a.top1(), c.top1, a.meanAbs(), c.meanAbs, a.flips(), a.routed, c.flips)
	}
}

// compareGolden replays the golden's sequences on the engine and reports the agreement of the final
// outputs and router choices, plus (fp32 goldens) the relative error of p after every layer.
func compareGolden(t *testing.T, modelDir, goldenDir string, prec ops.Precision) (agreement, []float64) {
	t.Helper()
	g := readGolden(t, goldenDir, prec.String())
	e, d, err := Open(context.Background(), modelDir, cpu.New(cpu.Options{Precision: prec}), EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	defer e.Close()
	all := make([]int, g.NumLayers)
	for i := range all {
		all[i] = i
	}
	req := Request{Options: Options{TopK: g.TopK, Router: true}}
	if prec == ops.FP32 {
		req.Options.Hidden = all
	}
	for _, s := range g.Sequences {
		req.Sequences = append(req.Sequences, Sequence{Tokens: s.IDs})
	}
	res, _, err := e.Run(context.Background(), []Request{req})
	if err != nil {
		t.Fatal(err)
	}
	var a agreement
	for si, s := range g.Sequences {
		r := res[0][si]
		if len(r.Router) != len(g.MoELayers) {
			t.Fatalf("sequence %d: the engine reported %d MoE layers' routing, the golden %d", si, len(r.Router), len(g.MoELayers))
		}
		if len(s.Router) != len(s.IDs) || len(s.TopKIDs) != len(s.IDs) {
			t.Fatalf("golden sequence %d: %d tokens but %d routing rows and %d top-k rows", si, len(s.IDs), len(s.Router), len(s.TopKIDs))
		}
		for pos := range s.IDs {
			if pos < len(s.Logprob) {
				d := math.Abs(float64(r.Stats[pos].Logprob) - s.Logprob[pos])
				a.sumAbs += d
				a.maxAbs = max(a.maxAbs, d)
				a.scored++
			}
			a.positions++
			if r.Stats[pos].TopIDs[0] == s.TopKIDs[pos][0] {
				a.top1Same++
			}
			if len(s.Router[pos]) != len(r.Router) {
				t.Fatalf("golden sequence %d position %d: routing of %d layers, want %d", si, pos, len(s.Router[pos]), len(r.Router))
			}
			for li, lr := range r.Router {
				want := s.Router[pos][li]
				got := lr.IDs[pos*lr.K : (pos+1)*lr.K]
				a.routed++
				if !sameSet(got, want) {
					a.routeDiff++
				}
			}
		}
	}
	var relErr []float64
	if prec == ops.FP32 {
		relErr = hiddenRelErr(t, goldenDir, g, res[0])
	}
	return a, relErr
}

func sameSet(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[int32]bool{}
	for _, x := range a {
		m[x] = true
	}
	for _, x := range b {
		if !m[x] {
			return false
		}
	}
	return true
}

// hiddenRelErr is ||p_go - p_ref|| / ||p_ref|| per layer over all tokens.
func hiddenRelErr(t *testing.T, dir string, g *golden, res []Result) []float64 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "hidden-fp32.f32"))
	if err != nil {
		t.Fatal(err)
	}
	layers, tokens, dim := g.HiddenShape[0], g.HiddenShape[1], g.HiddenShape[2]
	if len(raw) != 4*layers*tokens*dim {
		t.Fatalf("hidden-fp32.f32: %d bytes, want %d", len(raw), 4*layers*tokens*dim)
	}
	total := 0
	for _, r := range res {
		total += len(r.Tokens)
		if len(r.Hidden) != layers {
			t.Fatalf("hidden states of %d layers, the golden has %d", len(r.Hidden), layers)
		}
	}
	if total != tokens {
		t.Fatalf("hidden-fp32.f32 holds %d tokens, the replay %d", tokens, total)
	}
	out := make([]float64, layers)
	for l := 0; l < layers; l++ {
		var num, den float64
		tok := 0
		for _, r := range res {
			v := r.Hidden[l].Values
			if len(v) != len(r.Tokens)*dim {
				t.Fatalf("layer %d: %d hidden values for %d tokens of width %d", l, len(v), len(r.Tokens), dim)
			}
			for i := range v {
				ref := float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*((l*tokens+tok)*dim+i):])))
				d := float64(v[i]) - ref
				num += d * d
				den += ref * ref
			}
			tok += len(r.Tokens)
		}
		if !(den > 0) {
			t.Fatalf("hidden-fp32.f32: layer %d of the reference is all zeros (or not finite)", l)
		}
		out[l] = math.Sqrt(num / den)
	}
	return out
}

// TestGoldenDir compares the engine with goldens of any model directory named by the environment
// (POTATO_GOLDEN_MODEL, POTATO_GOLDEN_DIR), for checks outside the committed test data.
func TestGoldenDir(t *testing.T) {
	modelDir, goldenDir := os.Getenv("POTATO_GOLDEN_MODEL"), os.Getenv("POTATO_GOLDEN_DIR")
	if modelDir == "" || goldenDir == "" {
		t.Skip("set POTATO_GOLDEN_MODEL and POTATO_GOLDEN_DIR to compare a model directory with k3_ref goldens")
	}
	for _, prec := range []ops.Precision{ops.FP32, ops.BF16} {
		a, rel := compareGolden(t, modelDir, goldenDir, prec)
		t.Logf("%s: top-1 %.4f, mean |dlogprob| %.2e, max %.2e, router sets differing %.4f, rel err per layer %.2e",
			prec, a.top1(), a.meanAbs(), a.maxAbs, a.flips(), rel)
		checkGolden(t, prec.String(), prec, a, rel)
	}
}

// checkGolden holds one comparison with the goldens to its precision's criteria, and in fp32 the running
// sum's relative error to 1e-5 at every layer.
func checkGolden(t *testing.T, label string, prec ops.Precision, a agreement, rel []float64) {
	t.Helper()
	if prec == ops.BF16 {
		a.check(t, label, bf16Golden)
		return
	}
	a.check(t, label, fp32Golden)
	if len(rel) == 0 {
		t.Errorf("%s: no hidden states compared", label)
	}
	for l, r := range rel {
		if !(r <= 1e-5) {
			t.Errorf("%s: layer %d: relative error %.3g > 1e-5", label, l, r)
		}
	}
}
