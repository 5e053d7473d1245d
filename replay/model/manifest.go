package model

import (
	"errors"
	"fmt"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
)

// Name prefixes of the official checkpoint.
const (
	TextPrefix   = "language_model.model."
	LMHeadName   = "language_model.lm_head.weight"
	layersPrefix = TextPrefix + "layers."
)

// IgnoredPrefixes are tensor name prefixes of the image path, present in the release and never read.
var IgnoredPrefixes = []string{"vision_tower.", "mm_projector."}

// Ignored reports whether a checkpoint tensor belongs to a part of the release the engine skips.
func Ignored(name string) bool {
	for _, p := range IgnoredPrefixes {
		if len(name) >= len(p) && name[:len(p)] == p {
			return true
		}
	}
	return false
}

// Dims are the widths a config implies, named once so every user agrees on them.
type Dims struct {
	Hidden      int // H: 7168
	Vocab       int // 163840
	KDAHeads    int // 96
	KDAHeadDim  int // 128
	KDAWidth    int // heads x head dim: 12288
	ConvKernel  int // 4
	ALogLen     int // A_log's stored entries: num_heads used, the rest padding (128 in K3; Plan.SetALogLen)
	MLAHeads    int // 96
	QLora       int // 1536
	KVLora      int // 512
	QKNope      int // 128
	QKShared    int // 64: qk_rope_head_dim, a key slot shared by all heads (no rotary embedding in K3)
	VHead       int // 128
	DenseFFN    int // 33792
	Experts     int // 896
	TopK        int // 16
	ExpertFFN   int // 3072
	Latent      int // 3584
	SharedWidth int // shared experts fused: num_shared x moe_intermediate = 6144
}

// Dims returns the widths of the plan's config.
func (p *Plan) Dims() Dims {
	c := p.Config
	return Dims{
		Hidden: c.HiddenSize, Vocab: c.VocabSize,
		KDAHeads: c.LinearAttn.NumHeads, KDAHeadDim: c.LinearAttn.HeadDim,
		KDAWidth: c.LinearAttn.NumHeads * c.LinearAttn.HeadDim, ConvKernel: c.LinearAttn.ShortConvKernelSize,
		ALogLen:  p.aLogLen(),
		MLAHeads: c.NumAttentionHeads, QLora: c.QLoraRank, KVLora: c.KVLoraRank,
		QKNope: c.QKNopeHeadDim, QKShared: c.QKRopeHeadDim, VHead: c.VHeadDim,
		DenseFFN: c.IntermediateSize, Experts: c.NumExperts, TopK: c.NumExpertsPerToken,
		ExpertFFN: c.MoEIntermediateSize, Latent: c.RoutedExpertHidden,
		SharedWidth: c.NumSharedExperts * c.MoEIntermediateSize,
	}
}

// aLogLen is A_log's stored length: as SetALogLen set it, else head_dim entries (K3's 128, the release's
// padding) or num_heads where there are more heads than that.
func (p *Plan) aLogLen() int {
	if p.ALogLen > 0 {
		return p.ALogLen
	}
	return max(p.Config.LinearAttn.HeadDim, p.Config.LinearAttn.NumHeads)
}

// ErrALog is matched by SetALogLen's refusals.
var ErrALog = errors.New("model: A_log")

// SetALogLen sets the length A_log has in the checkpoint, given the shape stored for the first KDA layer
// (shape nil: the plan has no KDA layer, or the tensor is missing, which Check reports). The architecture
// uses num_heads entries; a checkpoint may pad past them (K3 to head_dim = 128, other loaders to a
// multiple of 128), so any one-dimensional length of at least num_heads is taken; a shorter one, or
// another rank, is refused naming the tensor. Every KDA layer must then store that length (Check).
func (p *Plan) SetALogLen(name string, shape []int64) error {
	if shape == nil {
		return nil
	}
	heads := p.Config.LinearAttn.NumHeads
	if len(shape) != 1 || shape[0] < int64(heads) {
		return fmt.Errorf("%w: tensor %s: want [n] F32 with n >= %d (linear_attn_config.num_heads; the rest padding), got %v", ErrALog, name, heads, shape)
	}
	p.ALogLen = int(shape[0])
	return nil
}

// Fit takes from a checkpoint what the architecture leaves to it (A_log's padded length, SetALogLen),
// before the checkpoint is checked against Tensors. lookup is checkpoint.Dir.Lookup.
func (p *Plan) Fit(lookup func(name string) (checkpoint.Tensor, bool)) error {
	name := p.FirstKDAALog()
	if name == "" {
		return nil
	}
	if t, ok := lookup(name); ok {
		return p.SetALogLen(name, t.Shape)
	}
	return nil
}

// FirstKDAALog is the name of the first KDA layer's A_log ("" when no layer is KDA): the tensor whose
// stored shape SetALogLen takes.
func (p *Plan) FirstKDAALog() string {
	for i, l := range p.Layers {
		if l.Attn == KDA {
			return LayerPrefix(i) + "self_attn.A_log"
		}
	}
	return ""
}

// LayerPrefix is the name prefix of layer i's tensors.
func LayerPrefix(i int) string { return fmt.Sprintf("%s%d.", layersPrefix, i) }

// ExpertPrefix is the name prefix of routed expert e of layer i; w1 (gate), w2 (down) and w3 (up) follow.
func ExpertPrefix(i, e int) string {
	return fmt.Sprintf("%s%d.block_sparse_moe.experts.%d.", layersPrefix, i, e)
}

func spec(name string, dt checkpoint.DType, shape ...int) checkpoint.Spec {
	s := make([]int64, len(shape))
	for i, d := range shape {
		s[i] = int64(d)
	}
	return checkpoint.Spec{Name: name, DType: dt, Shape: s}
}

// GlobalTensors lists the tensors outside the layers: embedding, final norms and the output AttnRes mix,
// lm_head.
func (p *Plan) GlobalTensors() []checkpoint.Spec {
	d := p.Dims()
	return []checkpoint.Spec{
		spec(TextPrefix+"embed_tokens.weight", checkpoint.BF16, d.Vocab, d.Hidden),
		spec(TextPrefix+"norm.weight", checkpoint.BF16, d.Hidden),
		spec(TextPrefix+"output_attn_res_norm.weight", checkpoint.BF16, d.Hidden),
		spec(TextPrefix+"output_attn_res_proj.weight", checkpoint.BF16, 1, d.Hidden),
		spec(LMHeadName, checkpoint.BF16, d.Vocab, d.Hidden),
	}
}

// LayerTensors lists layer i's non-expert tensors (norms, AttnRes projections, attention, dense FFN or the
// MoE's router, latent projections and shared experts). Routed experts are listed by ExpertTensors.
func (p *Plan) LayerTensors(i int) []checkpoint.Spec {
	d, l, pre := p.Dims(), p.Layers[i], LayerPrefix(i)
	bf, f32 := checkpoint.BF16, checkpoint.F32
	out := []checkpoint.Spec{
		spec(pre+"input_layernorm.weight", bf, d.Hidden),
		spec(pre+"post_attention_layernorm.weight", bf, d.Hidden),
		spec(pre+"self_attention_res_norm.weight", bf, d.Hidden),
		spec(pre+"mlp_res_norm.weight", bf, d.Hidden),
		spec(pre+"self_attention_res_proj.weight", bf, 1, d.Hidden),
		spec(pre+"mlp_res_proj.weight", bf, 1, d.Hidden),
	}
	a := pre + "self_attn."
	switch l.Attn {
	case KDA:
		out = append(out,
			spec(a+"q_proj.weight", bf, d.KDAWidth, d.Hidden),
			spec(a+"k_proj.weight", bf, d.KDAWidth, d.Hidden),
			spec(a+"v_proj.weight", bf, d.KDAWidth, d.Hidden),
			spec(a+"g_proj.weight", bf, d.KDAWidth, d.Hidden),
			spec(a+"q_conv1d.weight", f32, d.KDAWidth, 1, d.ConvKernel),
			spec(a+"k_conv1d.weight", f32, d.KDAWidth, 1, d.ConvKernel),
			spec(a+"v_conv1d.weight", f32, d.KDAWidth, 1, d.ConvKernel),
			spec(a+"f_a_proj.weight", bf, d.KDAHeadDim, d.Hidden),
			spec(a+"f_b_proj.weight", bf, d.KDAWidth, d.KDAHeadDim),
			spec(a+"b_proj.weight", bf, d.KDAHeads, d.Hidden),
			spec(a+"A_log", f32, d.ALogLen),
			spec(a+"dt_bias", f32, d.KDAWidth),
			spec(a+"o_norm.weight", f32, d.KDAHeadDim),
			spec(a+"o_proj.weight", bf, d.Hidden, d.KDAWidth),
		)
	case MLA:
		out = append(out,
			spec(a+"q_a_proj.weight", bf, d.QLora, d.Hidden),
			spec(a+"q_a_layernorm.weight", bf, d.QLora),
			spec(a+"q_b_proj.weight", bf, d.MLAHeads*(d.QKNope+d.QKShared), d.QLora),
			spec(a+"kv_a_proj_with_mqa.weight", bf, d.KVLora+d.QKShared, d.Hidden),
			spec(a+"kv_a_layernorm.weight", bf, d.KVLora),
			spec(a+"kv_b_proj.weight", bf, d.MLAHeads*(d.QKNope+d.VHead), d.KVLora),
			spec(a+"g_proj.weight", bf, d.MLAHeads*d.VHead, d.Hidden),
			spec(a+"o_proj.weight", bf, d.Hidden, d.MLAHeads*d.VHead),
		)
	}
	switch l.FFN {
	case Dense:
		m := pre + "mlp."
		out = append(out,
			spec(m+"gate_proj.weight", bf, d.DenseFFN, d.Hidden),
			spec(m+"up_proj.weight", bf, d.DenseFFN, d.Hidden),
			spec(m+"down_proj.weight", bf, d.Hidden, d.DenseFFN),
		)
	case MoE:
		m := pre + "block_sparse_moe."
		out = append(out,
			spec(m+"gate.weight", bf, d.Experts, d.Hidden),
			spec(m+"gate.e_score_correction_bias", f32, d.Experts),
			spec(m+"routed_expert_down_proj.weight", bf, d.Latent, d.Hidden),
			spec(m+"routed_expert_norm.weight", bf, d.Latent),
			spec(m+"routed_expert_up_proj.weight", bf, d.Hidden, d.Latent),
			spec(m+"shared_experts.gate_proj.weight", bf, d.SharedWidth, d.Hidden),
			spec(m+"shared_experts.up_proj.weight", bf, d.SharedWidth, d.Hidden),
			spec(m+"shared_experts.down_proj.weight", bf, d.Hidden, d.SharedWidth),
		)
	}
	return out
}

// ExpertTensors lists the six MXFP4 tensors of routed expert e in layer i, in the order w1 (gate), w3 (up),
// w2 (down), packed before scale. Codes are 4 bits (two columns a byte); scales are one E8M0 byte per 32
// columns.
func (p *Plan) ExpertTensors(i, e int) []checkpoint.Spec {
	d, pre := p.Dims(), ExpertPrefix(i, e)
	u8 := checkpoint.U8
	return []checkpoint.Spec{
		spec(pre+"w1.weight_packed", u8, d.ExpertFFN, d.Latent/2),
		spec(pre+"w1.weight_scale", u8, d.ExpertFFN, d.Latent/32),
		spec(pre+"w3.weight_packed", u8, d.ExpertFFN, d.Latent/2),
		spec(pre+"w3.weight_scale", u8, d.ExpertFFN, d.Latent/32),
		spec(pre+"w2.weight_packed", u8, d.Latent, d.ExpertFFN/2),
		spec(pre+"w2.weight_scale", u8, d.Latent, d.ExpertFFN/32),
	}
}

// Tensors lists every text tensor the config requires: globals, then each layer's own tensors followed by
// its experts. It is the contract both the reader (checkpoint.Dir.Check) and the synthetic writer obey.
func (p *Plan) Tensors() []checkpoint.Spec {
	out := p.GlobalTensors()
	for i, l := range p.Layers {
		out = append(out, p.LayerTensors(i)...)
		if l.FFN == MoE {
			for e := 0; e < p.Config.NumExperts; e++ {
				out = append(out, p.ExpertTensors(i, e)...)
			}
		}
	}
	return out
}

// LayerBytes is the size of layer i's tensors: its own and, in an MoE layer, all its experts.
func (p *Plan) LayerBytes(i int) (own, experts int64) {
	for _, s := range p.LayerTensors(i) {
		own += s.Bytes()
	}
	if p.Layers[i].FFN == MoE {
		for _, s := range p.ExpertTensors(i, 0) {
			experts += s.Bytes()
		}
		experts *= int64(p.Config.NumExperts)
	}
	return own, experts
}
