package main

import (
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/synth"
)

// TestExtrapolate: at K3's widths (the k3-layer preset, 3 layers) a wave's per-kind layer times scale to
// K3's 1 + 68 + 24 layers; a model of other widths prints nothing.
func TestExtrapolate(t *testing.T) {
	plans := map[string]*model.Plan{}
	for _, p := range synth.Presets() {
		if p.Name != "k3-layer" && p.Name != "tiny" {
			continue
		}
		cfg, err := p.TextConfig(3)
		if err != nil {
			t.Fatal(err)
		}
		if plans[p.Name], err = model.NewPlan(cfg); err != nil {
			t.Fatal(err)
		}
	}
	perLayer := map[string][2]float64{"kda+dense": {0.1, 0.05}, "kda+moe": {0.5, 0.25}, "mla+moe": {0.4, 0.25}}
	var out strings.Builder
	if err := extrapolate(&out, plans["k3-layer"], perLayer, 0.2, "test"); err != nil {
		t.Fatal(err)
	}
	// 0.2 + 0.1 + 68 x 0.5 + 24 x 0.4 = 43.9; bound 0.05 + 92 x 0.25 = 23.05
	want := "a full K3 pass at these rates (test: 1 kda+dense, 68 kda+moe, 24 mla+moe, plus 0.200s outside the layers): 43.9s; the layers' bound 23.1s\n"
	if out.String() != want {
		t.Errorf("k3-layer:\n got %q\nwant %q", out.String(), want)
	}
	out.Reset()
	if err := extrapolate(&out, plans["tiny"], perLayer, 0.2, "test"); err != nil || out.Len() != 0 {
		t.Errorf("tiny: %q, %v; want nothing", out.String(), err)
	}
}
