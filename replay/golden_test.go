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

// agreement is how two replays of the same sequences compare.
type agreement struct {
	positions, top1Same int
	sumAbs, maxAbs      float64
	routed, routeDiff   int
}

func (a agreement) top1() float64    { return float64(a.top1Same) / float64(a.positions) }
func (a agreement) meanAbs() float64 { return a.sumAbs / float64(a.positions) }
func (a agreement) flips() float64 {
	if a.routed == 0 {
		return 0
	}
	return float64(a.routeDiff) / float64(a.routed)
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
		for pos := range s.IDs {
			if pos < len(s.Logprob) {
				d := math.Abs(float64(r.Stats[pos].Logprob) - s.Logprob[pos])
				a.sumAbs += d
				a.maxAbs = max(a.maxAbs, d)
			}
			a.positions++
			if r.Stats[pos].TopIDs[0] == s.TopKIDs[pos][0] {
				a.top1Same++
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
	out := make([]float64, layers)
	for l := 0; l < layers; l++ {
		var num, den float64
		tok := 0
		for _, r := range res {
			v := r.Hidden[l].Values
			for i := range v {
				ref := float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*((l*tokens+tok)*dim+i):])))
				d := float64(v[i]) - ref
				num += d * d
				den += ref * ref
			}
			tok += len(r.Tokens)
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
	}
}
