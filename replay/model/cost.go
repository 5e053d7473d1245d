package model

// Cost counts the arithmetic of a forward pass: 2 FLOPs per multiply-add of every weight matrix a token
// passes through (its layers' attention and FFN projections, its k routed experts, the router, lm_head),
// plus attention's quadratic term. Elementwise work, norms and the KDA state update are left out: they are a
// few percent at K3's widths. The K3 total is about 208 GFLOP a token (DESIGN.md).

// MatmulParamsPerToken is the number of weight-matrix entries one token multiplies in layer i (routed
// experts: only the k it chooses).
func (p *Plan) MatmulParamsPerToken(i int) int64 {
	d := p.Dims()
	var n int64
	mat := func(rows, cols int) { n += int64(rows) * int64(cols) }
	switch p.Layers[i].Attn {
	case KDA:
		mat(4*d.KDAWidth, d.Hidden) // q, k, v, g
		mat(d.KDAHeadDim, d.Hidden)
		mat(d.KDAWidth, d.KDAHeadDim)
		mat(d.KDAHeads, d.Hidden)
		mat(d.Hidden, d.KDAWidth)
	case MLA:
		mat(d.QLora, d.Hidden)
		mat(d.MLAHeads*(d.QKNope+d.QKShared), d.QLora)
		mat(d.KVLora+d.QKShared, d.Hidden)
		mat(d.MLAHeads*(d.QKNope+d.VHead), d.KVLora)
		mat(d.MLAHeads*d.VHead, d.Hidden)
		mat(d.Hidden, d.MLAHeads*d.VHead)
	}
	switch p.Layers[i].FFN {
	case Dense:
		mat(3*d.DenseFFN, d.Hidden)
	case MoE:
		mat(d.Experts, d.Hidden) // router
		mat(2*d.Latent, d.Hidden)
		mat(3*d.SharedWidth, d.Hidden)
		n += int64(d.TopK) * 3 * int64(d.ExpertFFN) * int64(d.Latent)
	}
	return n
}

// LayerFLOPs is the arithmetic of layer i for a wave of the given sequence lengths.
func (p *Plan) LayerFLOPs(i int, seqLens []int) float64 {
	var tokens, pairs float64
	for _, t := range seqLens {
		tokens += float64(t)
		pairs += float64(t) * float64(t+1) / 2 // causal (query, key) pairs
	}
	f := 2 * float64(p.MatmulParamsPerToken(i)) * tokens
	if p.Layers[i].Attn == MLA {
		d := p.Dims()
		// scores and the weighted sum of values, per head, over the causal pairs
		f += 2 * pairs * float64(d.MLAHeads) * float64(d.QKNope+d.QKShared+d.VHead)
	} else {
		d := p.Dims()
		// the delta rule touches the d x d state about four times per token and head
		f += 8 * tokens * float64(d.KDAHeads) * float64(d.KDAHeadDim) * float64(d.KDAHeadDim)
	}
	return f
}

// OutputFLOPs is lm_head's arithmetic for the given number of tokens.
func (p *Plan) OutputFLOPs(tokens int) float64 {
	d := p.Dims()
	return 2 * float64(d.Vocab) * float64(d.Hidden) * float64(tokens)
}

// WidestActivation is the most columns any activation of a wave has per token: the dense FFN's hidden
// width, the attention projections', and (counted conservatively as one row per token) every chosen
// expert's FFN activations together. Bounding rows x WidestActivation bounds every tensor of a wave.
func (p *Plan) WidestActivation() int {
	d := p.Dims()
	return max(d.Hidden, d.KDAWidth, d.DenseFFN, d.SharedWidth, d.Latent,
		d.MLAHeads*(d.QKNope+d.QKShared), d.MLAHeads*(d.QKNope+d.VHead), d.TopK*d.ExpertFFN)
}
