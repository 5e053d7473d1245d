package synth

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// tuning holds the constants of the construction (doc.go explains each). They are measured, not derived:
// change one and re-measure with k3_ref's bf16-vs-fp32 comparison.
type tuning struct {
	anchor float32 // κ: the embedding's value in hidden dim 0, which no sublayer writes
	code   float32 // c: the embedding's value in its one routing-code dim per expert group
	qTyp   float64 // the typical scale of the embedding inside a normed sublayer input (measured)
	qOut   float64 // the same in the final normed state, where the embedding's share is larger (measured)

	routerMargin float64 // logit gap between a token's experts and the rest, at qTyp
	routerCenter float64 // typical router logit of a chosen expert (sigmoid in its sensitive range)
	routerCtx    float64 // sd of the input-dependent part of every router logit
	biasSpread   float64 // e_score_correction_bias ~ U(-b, b): never enough to cross the margin

	arContent float64 // sd of AttnRes scores from content
	arBonus   float64 // the embedding's extra score over the rest, at a layer's mixes
	arOut     float64 // the same for the output mix (the bigram signal reaches the logits from there)
	arJitter  float64 // ± per mixing site

	normJitter float64 // RMSNorm weights ~ 1 + normJitter*N(0,1)

	logitSea   float64 // ρ: sd of the logit of a token unrelated to the input
	priorSlope float64 // unigram prior π(v) = -slope*ln(1 + v/priorKnee)
	priorKnee  float64
	logitShift float64 // added to every logit: centres the mass in bf16's finer range
	top1Lo     float64 // a token's first successor logit above the prior zero: U(top1Lo, top1Hi)
	top1Hi     float64
	gap2Lo     float64 // second successor: top1 - U(gap2Lo, gap2Hi)
	gap2Hi     float64

	qkBias   float64 // mean of KDA q and k pre-activations: keeps q.k positive, outputs stable
	mlaScore float64 // sd of MLA attention scores
}

// defaultTuning is the construction the presets are measured with (doc.go has the figures).
var defaultTuning = tuning{
	anchor: 1, code: 1, qTyp: 0.8, qOut: 1.0,
	routerMargin: 10, routerCenter: 2, routerCtx: 0.4, biasSpread: 0.02,
	arContent: 0.5, arBonus: 0.5, arOut: 1.5, arJitter: 0.5,
	normJitter: 0.05,
	logitSea:   1.2, priorSlope: 1, priorKnee: 30, logitShift: -1,
	top1Lo: 4.8, top1Hi: 9, gap2Lo: 1.5, gap2Hi: 3,
	qkBias: 1, mlaScore: 1.5,
}

// builder turns a tensor name into the filler of its values. It holds what the tensors of one model
// share: dimensions, the seed, the layout of the reserved hidden dims.
type builder struct {
	plan   *model.Plan
	d      model.Dims
	seed   uint64
	numBPE int
	t      tuning
	// Hidden dims: 0 is the anchor, [1, 1+codeDims) the routing code, the rest content.
	groups, groupSize, codeDims int
	content                     int     // H - 1 - codeDims
	blockOut                    float64 // rms of one sublayer output
	tables                      expertTables
}

// newBuilder checks that the config admits the construction: experts split into top-k groups of an even
// size (each group's slots are the ± directions of groupSize/2 code dims), and room for content dims.
func newBuilder(plan *model.Plan, seed uint64, numBPE int) (*builder, error) {
	d := plan.Dims()
	b := &builder{plan: plan, d: d, seed: seed, numBPE: numBPE, t: defaultTuning}
	b.groups = d.TopK
	if d.Experts%d.TopK != 0 || (d.Experts/d.TopK)%2 != 0 {
		return nil, fmt.Errorf("synth: %d experts do not split into %d groups of an even size", d.Experts, d.TopK)
	}
	b.groupSize = d.Experts / d.TopK
	b.codeDims = d.Experts / 2
	b.content = d.Hidden - 1 - b.codeDims
	if b.content < d.Hidden/2 {
		return nil, fmt.Errorf("synth: hidden size %d leaves %d content dims after %d routing-code dims", d.Hidden, b.content, b.codeDims)
	}
	if numBPE < 256 || numBPE+tokenizer.NumSpecials != d.Vocab { // 256: the single bytes, and room for successors
		return nil, fmt.Errorf("synth: vocabulary %d is not %d BPE tokens + %d specials", d.Vocab, numBPE, tokenizer.NumSpecials)
	}
	// A block vector sums 2*block sublayer outputs; each is scaled so that a full block has about the
	// norm of an embedding (rms 1), and AttnRes mixes vectors of comparable size.
	b.blockOut = 1 / math.Sqrt(2*float64(plan.Config.AttnResBlockSize))
	return b, nil
}

// filler returns the filler of one tensor of the layout.
func (b *builder) filler(s checkpoint.Spec) (filler, error) {
	if model.Ignored(s.Name) {
		return b.vision(s), nil
	}
	rest, ok := strings.CutPrefix(s.Name, model.TextPrefix+"layers.")
	if !ok {
		return b.global(s)
	}
	num, field, ok := strings.Cut(rest, ".")
	i, err := strconv.Atoi(num)
	if !ok || err != nil || i < 0 || i >= len(b.plan.Layers) {
		return nil, fmt.Errorf("synth: no layer in tensor name %s", s.Name)
	}
	return b.layer(s, i, field)
}

// floats is a float filler for spec s whose row function is row.
func (b *builder) floats(s checkpoint.Spec, row func(r int, g *rng, out []float32)) filler {
	_, rowBytes := rows(s)
	return &floatRows{key: key(b.seed, s.Name), cols: int(rowBytes / s.DType.Size()), dtype: s.DType, row: row}
}

// normWeight fills an RMSNorm weight: 1 + jitter. Near 1 as trained norms are; not exactly 1, so that an
// engine that skips a norm weight gets a different answer.
func (b *builder) normWeight(s checkpoint.Spec) filler {
	return b.floats(s, func(_ int, g *rng, out []float32) {
		for i := range out {
			out[i] = 1 + float32(b.t.normJitter)*g.normal()
		}
	})
}

// gauss fills a matrix with N(0, sd^2) entries.
func (b *builder) gauss(s checkpoint.Spec, sd float64) filler {
	return b.floats(s, func(_ int, g *rng, out []float32) {
		for i := range out {
			out[i] = float32(sd) * g.normal()
		}
	})
}

// projection fills an output projection [hidden, in] whose output has rms outRMS for an input of rms
// inRMS, with zero rows for the reserved hidden dims: no sublayer writes the anchor or the routing code,
// so those dims of every block vector are exactly zero and the router reads the token's code undisturbed.
func (b *builder) projection(s checkpoint.Spec, inRMS, outRMS float64) filler {
	in := int(s.Shape[1])
	sd := outRMS / (inRMS * math.Sqrt(float64(in)))
	reserved := 1 + b.codeDims
	return b.floats(s, func(r int, g *rng, out []float32) {
		if r < reserved {
			clear(out)
			return
		}
		for i := range out {
			out[i] = float32(sd) * g.normal()
		}
	})
}

// input fills an input projection [out, hidden] of a normed input (rms 1): N(0, (sd/sqrt(H))^2), so each
// output has sd about sd, plus bias/qTyp in the anchor column: the anchor dim of a normed input is about
// qTyp * anchor, so the column acts as a bias of about `bias` on every output.
func (b *builder) input(s checkpoint.Spec, sd, bias float64) filler {
	w := sd / math.Sqrt(float64(b.d.Hidden))
	a := float32(bias / (b.t.qTyp * float64(b.t.anchor)))
	return b.floats(s, func(_ int, g *rng, out []float32) {
		for i := range out {
			out[i] = float32(w) * g.normal()
		}
		out[0] = a
	})
}

// vision fills the image path, which the engine never reads: norms near 1, weights N(0, 0.02^2).
func (b *builder) vision(s checkpoint.Spec) filler {
	if strings.Contains(s.Name, "norm") {
		return b.normWeight(s)
	}
	return b.gauss(s, 0.02)
}
