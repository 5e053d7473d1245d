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
		n += p.routedParamsPerToken()
	}
	return n
}

// routedParamsPerToken is the weight entries of the k routed experts one token passes through in a MoE
// layer: three ffn x latent matrices each.
func (p *Plan) routedParamsPerToken() int64 {
	d := p.Dims()
	return int64(d.TopK) * 3 * int64(d.ExpertFFN) * int64(d.Latent)
}

// RoutedExpertFLOPs is the routed experts' share of LayerFLOPs for a MoE layer over tokens tokens (the
// arithmetic of ExpertsAccumulate).
func (p *Plan) RoutedExpertFLOPs(tokens int) float64 {
	return 2 * float64(p.routedParamsPerToken()) * float64(tokens)
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

// SliceValuesPerToken bounds the activation values one row of a slice holds on the backend at the peak
// of any sublayer, beyond the per-token state (the running sum and the AttnRes blocks, StateValuesPerToken).
// It counts what the forward keeps alive at once: a sublayer's mix input and normed input, and the
// intermediates of its attention or FFN alive together (each is freed once the next step has read it).
// Bounding a slice's rows by it bounds the activations; the engine's plan multiplies it by the backend's
// bytes a value and adds the routed experts' scratch (ops.ExpertScratch) for MoE layers.
func (p *Plan) SliceValuesPerToken() int64 { return p.SliceValuesPerTokenFFN(false) }

// SliceValuesPerTokenFFN is SliceValuesPerToken where the SiTU-GLU FFNs (the dense FFN and the shared
// experts) hold a scratch that does not grow with the rows when boundedFFN is set (ops.SiTUFFNScratch,
// counted apart): their gate, up and SiTU outputs are then not a row's values.
func (p *Plan) SliceValuesPerTokenFFN(boundedFFN bool) int64 {
	d := p.Dims()
	denseMid, sharedMid := 3*int64(d.DenseFFN), 3*int64(d.SharedWidth)
	if boundedFFN {
		denseMid, sharedMid = 0, 0
	}
	h := int64(d.Hidden)
	in := 3 * h // the mix output, the normed input and the sublayer's output
	// KDA: a projection and its convolution, then the delta rule's four inputs and output (5 widths), one
	// to spare
	kda := in + 6*int64(d.KDAWidth) + int64(d.KDAHeadDim) + int64(d.KDAHeads)
	mla := in + 2*int64(d.QLora) + int64(d.MLAHeads*(d.QKNope+d.QKShared)) + int64(2*d.KVLora+2*d.QKShared) +
		int64(d.MLAHeads*(d.QKNope+d.VHead)) + 3*int64(d.MLAHeads*d.VHead)
	dense := in + denseMid
	// MoE: the shared experts' three widths and output, z, the accumulator, the sum and its norm, the up
	// projection; the routed experts' own scratch is the backend's (ops.ExpertScratch), planned apart
	moe := in + sharedMid + h + 4*int64(d.Latent) + 2*h
	var most int64
	for _, l := range p.Layers {
		a := kda
		if l.Attn == MLA {
			a = mla
		}
		f := dense
		if l.FFN == MoE {
			f = moe
		}
		most = max(most, a, f)
	}
	return most
}

// StateValuesPerToken is the per-token state a wave keeps between layers: the running sum and at most
// MaxBlocks block vectors, hidden values each (K3: 9 x 7168).
func (p *Plan) StateValuesPerToken() int64 {
	return int64(p.MaxBlocks()+1) * int64(p.Dims().Hidden)
}

// CarryValues bounds what the token-mixing ops carry between slices for one sequence of the given length:
// the short convolutions' last inputs, KDA's state of every head (and, for a backend that runs KDA in
// chunks, up to KDACarryRows rows of its inputs since the last chunk start), MLA's key latents and shared
// keys.
func (p *Plan) CarryValues(seqLen int) int64 {
	d := p.Dims()
	conv := 3 * int64(max(d.ConvKernel-1, 0)) * int64(d.KDAWidth)
	kda := int64(d.KDAHeads)*int64(d.KDAHeadDim)*int64(d.KDAHeadDim) + KDACarryRows*int64(4*d.KDAWidth+d.KDAHeads)
	mla := int64(seqLen) * int64(d.KVLora+d.QKShared)
	return conv + kda + mla
}

// KDACarryRows bounds the rows of KDA's inputs (q, k, v, graw and braw) a backend that runs KDA in chunks
// carries from slice to slice: cuda's chunks of 16 rows (kernels/kda_chunk.cu) leave at most 15.
const KDACarryRows = 15

// PrefixValues bounds the transient values an MLA op of a slice holds for a sequence that began seqLen
// rows before: its carried key latents expanded again to every head's keys and values (kv_b_proj's
// output), and the slice's keys put after them, both alive while they are joined (0 without MLA layers).
func (p *Plan) PrefixValues(seqLen int) int64 {
	if len(p.LayerIndices(MLA)) == 0 {
		return 0
	}
	d := p.Dims()
	return 2 * int64(seqLen) * (int64(d.MLAHeads)*int64(d.QKNope+d.VHead) + int64(d.QKShared))
}
