package model

import (
	"context"
	"fmt"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Globals are the weights outside the layers, resident for the whole life of a model.
type Globals struct {
	Embed     ops.Tensor // embed_tokens: [vocab, hidden] bf16
	Norm      ops.Tensor // norm: [1, hidden] bf16, before lm_head
	OutputMix ops.Tensor // output_attn_res_norm * output_attn_res_proj folded: [1, hidden] f32
	LMHead    ops.Tensor // lm_head: [vocab, hidden] bf16
}

// LayerWeights are one layer's weights other than its routed experts. Attn is *KDAWeights or *MLAWeights;
// FFN is *DenseWeights or *MoEWeights, as the plan says.
type LayerWeights struct {
	Layer    Layer
	AttnMix  ops.Tensor // self_attention_res_norm * self_attention_res_proj folded: [1, hidden] f32
	MLPMix   ops.Tensor // mlp_res_norm * mlp_res_proj folded: [1, hidden] f32
	AttnNorm ops.Tensor // input_layernorm: [1, hidden] bf16
	FFNNorm  ops.Tensor // post_attention_layernorm: [1, hidden] bf16
	Attn     Attention
	FFN      FFN
	all      []ops.Tensor // everything uploaded, for Free
}

// Attention is a token-mixing sublayer: KDA or MLA.
type Attention interface {
	// Forward maps the normed input x ([tokens, hidden]) to the sublayer's output ([tokens, hidden]).
	Forward(f *Pass, x ops.Tensor) (ops.Tensor, error)
}

// FFN is a channel-mixing sublayer: dense or MoE.
type FFN interface {
	// Outputs maps the normed input x ([tokens, hidden]) to the sublayer's output: a, or rounded(a + b)
	// where b is not nil ([tokens, hidden] each). The two addends stay apart so that the running sum takes
	// them in one op (Pass.accumulateSum).
	Outputs(f *Pass, x ops.Tensor) (a, b ops.Tensor, err error)
}

// LoadGlobals reads and uploads the global weights.
func (m *Model) LoadGlobals(ctx context.Context, src Source) (*Globals, error) {
	ld := &loader{ctx: ctx, b: m.Ops, src: src}
	g := m.Plan.GlobalTensors()
	out := &Globals{
		Embed:     ld.tensor(g[0]),
		Norm:      ld.tensor(g[1]),
		OutputMix: ld.foldedMix(g[2], g[3]),
		LMHead:    ld.tensor(g[4]),
	}
	if ld.err != nil {
		for _, t := range []ops.Tensor{out.Embed, out.Norm, out.OutputMix, out.LMHead} {
			m.Ops.Free(t)
		}
		return nil, fmt.Errorf("globals: %w", ld.err)
	}
	return out, nil
}

// LoadLayer reads and uploads layer i's weights (not its routed experts). Free them with FreeLayer.
func (m *Model) LoadLayer(ctx context.Context, i int, src Source) (*LayerWeights, error) {
	if i < 0 || i >= len(m.Plan.Layers) {
		return nil, fmt.Errorf("layer %d: outside 0..%d", i, len(m.Plan.Layers)-1)
	}
	ld := &loader{ctx: ctx, b: m.Ops, src: src}
	specs := m.Plan.LayerTensors(i)
	byName := make(map[string]checkpoint.Spec, len(specs))
	for _, s := range specs {
		byName[s.Name] = s
	}
	w := &LayerWeights{Layer: m.Plan.Layers[i]}
	pre := LayerPrefix(i)
	get := func(suffix string) ops.Tensor {
		s, ok := byName[pre+suffix]
		if !ok { // a programming error between the manifest and this binding, not a checkpoint problem
			if ld.err == nil {
				ld.err = fmt.Errorf("tensor %s%s: not in the layer manifest", pre, suffix)
			}
			return nil
		}
		t := ld.tensor(s)
		if t != nil {
			w.all = append(w.all, t)
		}
		return t
	}
	mix := func(site string) ops.Tensor {
		t := ld.foldedMix(byName[pre+site+"_res_norm.weight"], byName[pre+site+"_res_proj.weight"])
		if t != nil {
			w.all = append(w.all, t)
		}
		return t
	}
	w.AttnMix, w.MLPMix = mix("self_attention"), mix("mlp")
	w.AttnNorm, w.FFNNorm = get("input_layernorm.weight"), get("post_attention_layernorm.weight")
	switch w.Layer.Attn {
	case KDA:
		w.Attn = bindKDA(get)
	case MLA:
		w.Attn = bindMLA(get)
	}
	switch w.Layer.FFN {
	case Dense:
		w.FFN = bindDense(get)
	case MoE:
		w.FFN = bindMoE(get, i)
	}
	if ld.err != nil {
		m.FreeLayer(w)
		return nil, fmt.Errorf("layer %d (%s+%s): %w", i, w.Layer.Attn, w.Layer.FFN, ld.err)
	}
	return w, nil
}

// FreeLayer releases every tensor of w.
func (m *Model) FreeLayer(w *LayerWeights) {
	if w == nil {
		return
	}
	for _, t := range w.all {
		m.Ops.Free(t)
	}
	w.all = nil
}
