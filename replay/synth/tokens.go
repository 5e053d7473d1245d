package synth

import (
	"fmt"
	"math"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
)

// The vocabulary side of the construction: a token's embedding carries its routing code and a bigram
// signal, a direction in the content dims that lm_head turns into high logits for a few successor tokens.
// Both are functions of (seed, token) only, so the embedding, lm_head and router fillers compute them
// independently and agree.

// numSuccessors is how many tokens a token's embedding points at, with decreasing logits.
const numSuccessors = 3

// maxSignal is the largest share of the embedding's squared content norm given to the successor
// directions (reached only in narrow models such as tiny, where sqrt(content dims) limits the logit a
// direction can carry).
const maxSignal = 0.9

// successors returns token t's successor tokens and their target logits above the prior's zero level.
// Successors are drawn from the unigram prior (frequent tokens follow more often, as in text); the
// first is separated from the second by at least gap2Lo nats so that top-1 is never a near tie.
func (b *builder) successors(t int) (ids [numSuccessors]int, logits [numSuccessors]float64) {
	g := stream(key(b.seed, "successors"), t)
	top := b.t.top1Lo + (b.t.top1Hi-b.t.top1Lo)*g.uniform()
	logits[0] = top
	logits[1] = top - (b.t.gap2Lo + (b.t.gap2Hi-b.t.gap2Lo)*g.uniform())
	logits[2] = logits[1] - (0.5 + 1.5*g.uniform())
	for j := range ids {
		for {
			// Inverse CDF of p(v) ∝ 1/(v + knee)^2 on [0, numBPE): successors are mostly frequent
			// tokens, whose prior is high, so a moderate signal makes them clear winners.
			k, n := b.t.priorKnee, float64(b.numBPE)
			v := int(1/(1/k-g.uniform()*(1/k-1/(n+k))) - k)
			if v != t && v < b.numBPE && (j == 0 || v != ids[0]) && (j < 2 || v != ids[1]) {
				ids[j] = v
				break
			}
		}
	}
	return ids, logits
}

// prior is the unigram log-prior of token v: Zipf-like in the id (byte-level BPE ids grow as merges get
// rarer); the special slots are far below every text token.
func (b *builder) prior(v int) float64 {
	if v >= b.numBPE {
		return -8
	}
	return -b.t.priorSlope * math.Log1p(float64(v)/b.t.priorKnee)
}

// codeSlot returns token t's slot (0..groupSize-1) in expert group grp.
func (b *builder) codeSlot(t, grp int) int {
	g := stream(key(b.seed, "routing-code"), t)
	s := 0
	for range grp + 1 {
		s = g.intn(b.groupSize)
	}
	return s
}

// codeDim returns the hidden dim and sign that encode slot s of group grp: each group owns groupSize/2
// dims, and a slot is one of their ± directions.
func (b *builder) codeDim(grp, s int) (dim int, sign float32) {
	sign = 1
	if s%2 == 1 {
		sign = -1
	}
	return 1 + grp*(b.groupSize/2) + s/2, sign
}

// unitContent draws a content direction from g with rms exactly 1 over the content dims.
func unitContent(g *rng, out []float32) {
	var ss float64
	for i := range out {
		v := g.normal()
		out[i] = v
		ss += float64(v) * float64(v)
	}
	s := float32(1 / math.Sqrt(ss/float64(len(out))))
	for i := range out {
		out[i] *= s
	}
}

// lmRow fills lm_head row v: the content direction of v scaled so that an unrelated normed input gives a
// logit of sd logitSea; the prior and a global shift in the anchor column (the anchor dim of the final
// normed state is about qOut*anchor); small weights on the code dims.
func (b *builder) lmRow(v int, g *rng, out []float32) {
	c0 := 1 + b.codeDims
	unitContent(g, out[c0:])
	w := float32(b.t.logitSea / math.Sqrt(float64(b.content)))
	for i := range out[c0:] {
		out[c0+i] *= w
	}
	for i := 1; i < c0; i++ {
		out[i] = w * g.normal()
	}
	out[0] = float32((b.prior(v) + b.t.logitShift) / (b.t.qOut * float64(b.t.anchor)))
}

// embedRow fills the embedding of token t: the anchor, its routing code, and content that gives each
// successor its target logit at the output (a combination of the successors' lm_head directions, solved
// so that their mutual overlaps do not blur the targets), the rest of the norm in a token-specific
// direction orthogonal to them (so it moves no successor logit).
func (b *builder) embedRow(t int, g *rng, out []float32) {
	clear(out)
	out[0] = b.t.anchor
	for grp := range b.groups {
		dim, sign := b.codeDim(grp, b.codeSlot(t, grp))
		out[dim] = sign * b.t.code
	}
	n := b.content
	ids, logits := b.successors(t)
	var u [numSuccessors][]float64
	var rhs [numSuccessors]float64
	dir := make([]float32, n)
	for j, v := range ids {
		lg := stream(key(b.seed, model.LMHeadName), v)
		unitContent(&lg, dir)
		u[j] = make([]float64, n)
		for i, x := range dir {
			u[j][i] = float64(x)
		}
		// lm_head turns content c into the logit sea/sqrt(n) * u.c * q: u.c = beta*n gives the
		// successor beta*sea*q*sqrt(n) over its prior.
		beta := max(logits[j]-b.prior(v), 0) / (b.t.logitSea * b.t.qOut * math.Sqrt(float64(n)))
		rhs[j] = beta * float64(n)
	}
	alpha := solveGram(u, rhs)
	c := make([]float64, n)
	for j := range u {
		for i, x := range u[j] {
			c[i] += alpha[j] * x
		}
	}
	share := dot(c, c) / float64(n)
	scale := 1.0
	if share > maxSignal { // keep some of the norm token-specific
		scale, share = math.Sqrt(maxSignal/share), maxSignal
	}
	// The token's own direction, with its components along the successors removed (Gram-Schmidt).
	own := make([]float64, n)
	for i := range own {
		own[i] = float64(g.normal())
	}
	var basis [numSuccessors][]float64
	for j := range u {
		e := append([]float64(nil), u[j]...)
		for _, q := range basis[:j] {
			axpy(-dot(e, q), q, e)
		}
		norm := math.Sqrt(dot(e, e))
		for i := range e {
			e[i] /= norm
		}
		basis[j] = e
		axpy(-dot(own, e), e, own)
	}
	ownScale := math.Sqrt((1 - share) * float64(n) / dot(own, own))
	content := out[1+b.codeDims:]
	for i := range content {
		content[i] = float32(scale*c[i] + ownScale*own[i])
	}
}

// solveGram returns alpha with sum_j (u_i.u_j) alpha_j = rhs_i: Gaussian elimination with partial
// pivoting on the (well-conditioned, nearly n*I) Gram matrix of the successor directions.
func solveGram(u [numSuccessors][]float64, rhs [numSuccessors]float64) [numSuccessors]float64 {
	const k = numSuccessors
	var a [k][k + 1]float64
	for i := range k {
		for j := range k {
			a[i][j] = dot(u[i], u[j])
		}
		a[i][k] = rhs[i]
	}
	for col := range k {
		p := col
		for r := col + 1; r < k; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[p][col]) {
				p = r
			}
		}
		a[col], a[p] = a[p], a[col]
		for r := col + 1; r < k; r++ {
			f := a[r][col] / a[col][col]
			for j := col; j <= k; j++ {
				a[r][j] -= f * a[col][j]
			}
		}
	}
	var x [k]float64
	for i := k - 1; i >= 0; i-- {
		s := a[i][k]
		for j := i + 1; j < k; j++ {
			s -= a[i][j] * x[j]
		}
		x[i] = s / a[i][i]
	}
	return x
}

func dot(a, b []float64) float64 {
	var s float64
	for i, x := range a {
		s += x * b[i]
	}
	return s
}

// axpy sets y += a*x (a no-op for a nil x).
func axpy(a float64, x, y []float64) {
	for i, v := range x {
		y[i] += a * v
	}
}

// global returns the filler of a tensor outside the layers.
func (b *builder) global(s checkpoint.Spec) (filler, error) {
	switch s.Name {
	case model.TextPrefix + "embed_tokens.weight":
		return b.floats(s, b.embedRow), nil
	case model.LMHeadName:
		return b.floats(s, b.lmRow), nil
	case model.TextPrefix + "norm.weight", model.TextPrefix + "output_attn_res_norm.weight":
		return b.normWeight(s), nil
	case model.TextPrefix + "output_attn_res_proj.weight":
		return b.attnResProj(s, "output", len(b.plan.Layers)), nil
	}
	return nil, fmt.Errorf("synth: no construction for tensor %s", s.Name)
}
