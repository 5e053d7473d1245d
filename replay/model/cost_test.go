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
