package model

import (
	"math"
	"testing"
)

// TestK3FLOPsPerToken checks the count against DESIGN.md's figure for K3: about 208 GFLOP a token.
func TestK3FLOPsPerToken(t *testing.T) {
	p, err := NewPlan(K3TextConfig())
	if err != nil {
		t.Fatal(err)
	}
	var f float64
	for i := range p.Layers {
		f += p.LayerFLOPs(i, []int{1})
	}
	f += p.OutputFLOPs(1)
	if g := f / 1e9; math.Abs(g-208) > 5 {
		t.Errorf("K3: %.1f GFLOP a token, want about 208", g)
	}
	// the quadratic term of MLA grows with the sequence: 4k tokens cost more than 4k single tokens
	if p.LayerFLOPs(3, []int{4096}) <= p.LayerFLOPs(3, []int{1})*4096 {
		t.Error("MLA FLOPs do not grow with sequence length")
	}
}

// TestRoutedExpertFLOPs: the routed experts of a K3 MoE layer cost 2 x 16 x 3 x 3072 x 3584 FLOPs a
// token (about 1.06 GFLOP), a part of the layer's count, and nothing of a dense layer's.
func TestRoutedExpertFLOPs(t *testing.T) {
	p, err := NewPlan(K3TextConfig())
	if err != nil {
		t.Fatal(err)
	}
	const tokens = 1000
	if got, want := p.RoutedExpertFLOPs(tokens), 2.0*16*3*3072*3584*tokens; got != want {
		t.Errorf("RoutedExpertFLOPs(%d) = %g, want %g", tokens, got, want)
	}
	moe, dense := p.LayerFLOPs(1, []int{tokens}), p.LayerFLOPs(0, []int{tokens})
	if r := p.RoutedExpertFLOPs(tokens); !(r < moe) || !(moe-r < dense) {
		t.Errorf("routed %g of a MoE layer's %g FLOPs (a dense layer: %g): not a part of it", r, moe, dense)
	}
}
