package synth

import (
	"fmt"
	"math"
	"strings"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
)

// moe fills the tensors of an MoE block (K3_SPEC.md 5.5).
func (b *builder) moe(s checkpoint.Spec, i int, f string) (filler, error) {
	half := b.blockOut / math.Sqrt2 // routed and shared parts share the output budget
	switch f {
	case "gate.weight":
		return b.router(s, i), nil
	case "gate.e_score_correction_bias":
		spread := float32(b.t.biasSpread)
		return b.floats(s, func(_ int, g *rng, out []float32) {
			for e := range out {
				out[e] = spread * float32(2*g.uniform()-1)
			}
		}), nil
	case "routed_expert_down_proj.weight":
		return b.input(s, 1, 0), nil
	case "routed_expert_norm.weight":
		return b.normWeight(s), nil
	case "routed_expert_up_proj.weight":
		return b.projection(s, 1, half), nil
	case "shared_experts.gate_proj.weight", "shared_experts.up_proj.weight":
		return b.input(s, ffnInputSD, 0), nil
	case "shared_experts.down_proj.weight":
		return b.projection(s, situRMS, half), nil
	}
	if rest, ok := strings.CutPrefix(f, "experts."); ok {
		if _, field, ok := strings.Cut(rest, "."); ok {
			return b.expert(s, field)
		}
	}
	return nil, fmt.Errorf("synth: no construction for MoE tensor %s", s.Name)
}

// routerSlots returns, for layer i, each expert's (group, slot): the layer's own random assignment of
// experts to the code slots, so that one token uses different experts in different layers.
func (b *builder) routerSlots(i int) []int {
	g := stream(key(b.seed, fmt.Sprintf("router-slots.%d", i)), 0)
	perm := g.perm(b.d.Experts) // perm[group*groupSize + slot] = expert
	slot := make([]int, b.d.Experts)
	for j, e := range perm {
		slot[e] = j
	}
	return slot
}

// router fills gate.weight of layer i. Expert e owns slot s of group grp; its row reads that slot's code
// dim with weight ±a and the anchor with weight -c, plus N(0, (routerCtx/sqrt(H))^2) everywhere:
//
//	a token whose code is in slot s:      logit ≈ q*(a*code - c*anchor) + ctx = routerCenter + ctx
//	the other slots of the group:         logit ≈ -q*c*anchor + ctx          = routerCenter - routerMargin + ctx
//	the opposite slot (same dim, -sign):  lower still
//
// (q ≈ qTyp is the embedding's scale in the normed input, ctx ~ N(0, routerCtx^2) the input-dependent
// part). Each group contributes exactly one expert, so the top-k is the token's k slots with a gap of
// routerMargin*q/qTyp to the rest: rounding, summation order or a small perturbation cannot change it,
// while the weights among the chosen k (sigmoid near routerCenter) still depend on the input.
func (b *builder) router(s checkpoint.Spec, i int) filler {
	slots := b.routerSlots(i)
	a := b.t.routerMargin / (b.t.qTyp * float64(b.t.code))
	c := (b.t.routerMargin - b.t.routerCenter) / (b.t.qTyp * float64(b.t.anchor))
	sd := float32(b.t.routerCtx / math.Sqrt(float64(b.d.Hidden)))
	return b.floats(s, func(e int, g *rng, out []float32) {
		for k := range out {
			out[k] = sd * g.normal()
		}
		j := slots[e]
		dim, sign := b.codeDim(j/b.groupSize, j%b.groupSize)
		out[dim] = sign * float32(a)
		out[0] = -float32(c)
	})
}
