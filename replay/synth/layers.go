package synth

import (
	"fmt"
	"math"
	"strings"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
)

// Typical sizes of sublayer activations for inputs of rms 1, used to scale the projections that read them
// (measured on the tiny preset; they only set output scales, nothing depends on them exactly).
const (
	situRMS    = 0.6  // SiTU(a, b) for a, b ~ N(0, 1)
	gatedRMS   = 0.54 // RMSNorm'd KDA output times sigmoid(N(0, 1)): sqrt(E[sigmoid^2])
	mlaOutRMS  = 0.35 // an attention-weighted mean of unit values, times the sigmoid gate
	fbSD       = 0.5  // sd of the KDA gate input graw around dt_bias
	convTapSD  = 0.1  // spread of the short-conv taps around their mean profile
	betaLogit  = 1.0  // sd of the KDA beta pre-activation
	ffnInputSD = 1.0  // sd of gate/up pre-activations
)

// layer returns the filler of tensor field of layer i.
func (b *builder) layer(s checkpoint.Spec, i int, field string) (filler, error) {
	switch field {
	case "input_layernorm.weight", "post_attention_layernorm.weight",
		"self_attention_res_norm.weight", "mlp_res_norm.weight":
		return b.normWeight(s), nil
	case "self_attention_res_proj.weight":
		return b.attnResProj(s, "attn", i), nil
	case "mlp_res_proj.weight":
		return b.attnResProj(s, "mlp", i), nil
	}
	if f, ok := strings.CutPrefix(field, "self_attn."); ok {
		if b.plan.Layers[i].Attn == model.MLA {
			return b.mla(s, f)
		}
		return b.kda(s, i, f)
	}
	if f, ok := strings.CutPrefix(field, "mlp."); ok {
		switch f {
		case "gate_proj.weight", "up_proj.weight":
			return b.input(s, ffnInputSD, 0), nil
		case "down_proj.weight":
			return b.projection(s, situRMS, b.blockOut), nil
		}
	}
	if f, ok := strings.CutPrefix(field, "block_sparse_moe."); ok {
		return b.moe(s, i, f)
	}
	return nil, fmt.Errorf("synth: no construction for tensor %s", s.Name)
}

// attnResProj fills the AttnRes projection of a mixing site. Scores are content-driven (sd arContent for
// any normed vector) plus a bonus for the embedding through the anchor dim, which only the embedding has:
// log(number of other vectors) + arBonus (± jitter per site), so that the embedding keeps a steady share
// of every mix at any depth. That share carries the routing code to every router and the bigram signal
// to the logits; the rest of the mix is context.
func (b *builder) attnResProj(s checkpoint.Spec, site string, i int) filler {
	others := b.mixOthers(site, i)
	bonus := b.t.arBonus
	if site == "output" {
		bonus = b.t.arOut
	}
	// The embedding's normed anchor value: anchor / rms(embedding), the content having rms 1.
	h := float64(b.d.Hidden)
	embRMS := math.Sqrt((float64(b.t.anchor*b.t.anchor) + float64(b.groups)*float64(b.t.code*b.t.code) + float64(b.content)) / h)
	anchorNormed := float64(b.t.anchor) / embRMS
	sd := float32(b.t.arContent / math.Sqrt(h))
	return b.floats(s, func(_ int, g *rng, out []float32) {
		for k := range out {
			out[k] = sd * g.normal()
		}
		score := math.Log(max(float64(others), 1)) + bonus + b.t.arJitter*(2*g.uniform()-1)
		out[0] = float32(score / anchorNormed)
	})
}

// mixOthers counts the vectors other than the embedding that AttnRes mixes at a site (K3_SPEC.md 5.1):
// before a layer's attention the list is B (before banking) plus p; before its FFN and at the output it
// is B plus p.
func (b *builder) mixOthers(site string, i int) int {
	if site == "output" {
		return b.plan.MaxBlocks()
	}
	l := b.plan.Layers[i]
	if site == "attn" && l.BlockStart {
		return l.Blocks - 1
	}
	return l.Blocks
}

// kda fills the tensors of a KDA layer (K3_SPEC.md 5.2).
func (b *builder) kda(s checkpoint.Spec, i int, f string) (filler, error) {
	d := b.d
	switch f {
	case "q_proj.weight", "k_proj.weight":
		// A common positive bias makes q and k (after the conv, SiLU and L2 norm) point into one
		// half-space: q.k > 0 for most pairs, so S^T q is a stable weighted sum of values instead of a
		// cancelling one, and its RMSNorm does not blow up rounding noise.
		return b.input(s, 1, b.t.qkBias), nil
	case "v_proj.weight", "g_proj.weight":
		return b.input(s, 1, 0), nil
	case "q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight":
		// Taps [t-3, t-2, t-1, t]: mostly the current token, a little of the previous ones.
		profile := [4]float32{0.05, 0.1, 0.25, 0.9}
		return b.floats(s, func(_ int, g *rng, out []float32) {
			for k := range out {
				out[k] = profile[k%4] + convTapSD*g.normal()
			}
		}), nil
	case "f_a_proj.weight":
		return b.input(s, 1, 0), nil
	case "f_b_proj.weight":
		return b.gauss(s, fbSD/math.Sqrt(float64(d.KDAHeadDim))), nil
	case "b_proj.weight":
		return b.input(s, betaLogit, 0), nil
	case "A_log":
		a := b.aLog(i)
		return b.floats(s, func(_ int, _ *rng, out []float32) {
			clear(out) // entries past num_heads are padding
			for h, v := range a {
				out[h] = float32(v)
			}
		}), nil
	case "dt_bias":
		// Decay per channel: g = -5 sigmoid(exp(A_log) (graw + dt_bias)). dt_bias puts the resting value
		// of exp(A_log)*dt_bias uniformly in [-7, 1]: channels from long memory (e^g ≈ 0.996) to fast
		// forgetting (e^g ≈ 0.03), and graw moves each around that.
		a := b.aLog(i)
		return b.floats(s, func(_ int, g *rng, out []float32) {
			for c := range out {
				out[c] = float32((-7 + 8*g.uniform()) / math.Exp(a[c/d.KDAHeadDim]))
			}
		}), nil
	case "o_norm.weight":
		return b.normWeight(s), nil
	case "o_proj.weight":
		return b.projection(s, gatedRMS, b.blockOut), nil
	}
	return nil, fmt.Errorf("synth: no construction for KDA tensor %s", s.Name)
}

// aLog returns the used entries of layer i's A_log (one per head): log of U(1, 4), so exp(A_log) scales
// the gate input's sensitivity by 1..4 from head to head.
func (b *builder) aLog(i int) []float64 {
	g := stream(key(b.seed, fmt.Sprintf("%sself_attn.A_log", model.LayerPrefix(i))), 0)
	a := make([]float64, b.d.KDAHeads)
	for h := range a {
		a[h] = math.Log(1 + 3*g.uniform())
	}
	return a
}

// mla fills the tensors of an MLA layer (K3_SPEC.md 5.3). Scores q.k/sqrt(192) have sd mlaScore: softmax
// attention that prefers some positions without collapsing onto one.
func (b *builder) mla(s checkpoint.Spec, f string) (filler, error) {
	d := b.d
	switch f {
	case "q_a_proj.weight", "kv_a_proj_with_mqa.weight", "g_proj.weight":
		return b.input(s, 1, 0), nil
	case "q_a_layernorm.weight", "kv_a_layernorm.weight":
		return b.normWeight(s), nil
	case "q_b_proj.weight":
		return b.gauss(s, b.t.mlaScore/math.Sqrt(float64(d.QLora))), nil
	case "kv_b_proj.weight":
		return b.gauss(s, 1/math.Sqrt(float64(d.KVLora))), nil
	case "o_proj.weight":
		return b.projection(s, mlaOutRMS, b.blockOut), nil
	}
	return nil, fmt.Errorf("synth: no construction for MLA tensor %s", s.Name)
}
