package model

import (
	"fmt"
)

// validate refuses a text config that the engine cannot replay exactly, naming the field at fault.
// Where K3 fixes a choice that a config could vary (router activation, top-k method, ...), anything other
// than K3's value is refused rather than guessed at.
func validate(c *TextConfig) error {
	positive := []struct {
		field string
		v     int
	}{
		{"hidden_size", c.HiddenSize},
		{"num_hidden_layers", c.NumHiddenLayers},
		{"vocab_size", c.VocabSize},
		{"num_attention_heads", c.NumAttentionHeads},
		{"num_key_value_heads", c.NumKeyValueHeads},
		{"q_lora_rank", c.QLoraRank},
		{"kv_lora_rank", c.KVLoraRank},
		{"qk_nope_head_dim", c.QKNopeHeadDim},
		{"v_head_dim", c.VHeadDim},
		{"linear_attn_config.head_dim", c.LinearAttn.HeadDim},
		{"linear_attn_config.num_heads", c.LinearAttn.NumHeads},
		{"linear_attn_config.short_conv_kernel_size", c.LinearAttn.ShortConvKernelSize},
		{"intermediate_size", c.IntermediateSize},
		{"num_experts", c.NumExperts},
		{"num_experts_per_token", c.NumExpertsPerToken},
		{"moe_intermediate_size", c.MoEIntermediateSize},
		{"routed_expert_hidden_size", c.RoutedExpertHidden},
		{"attn_res_block_size", c.AttnResBlockSize},
		{"moe_layer_freq", c.MoELayerFreq},
	}
	for _, f := range positive {
		if f.v <= 0 {
			return fmt.Errorf("%w: text_config.%s = %d: must be positive", ErrConfig, f.field, f.v)
		}
	}
	// Upper bounds, checked before anything is sized by these numbers (the layer plan, the layer lists'
	// check, the tensor manifest): a config past them is a typo or a damaged file, and planning it would
	// exhaust memory rather than fail.
	for _, f := range sizeBounds(c) {
		if f.v > f.max {
			return fmt.Errorf("%w: text_config.%s = %d: more than the %d this engine admits (K3: %d)", ErrConfig, f.field, f.v, f.max, f.k3)
		}
	}
	nonNegative := []struct {
		field string
		v     int
	}{
		{"qk_rope_head_dim", c.QKRopeHeadDim},
		{"num_shared_experts", c.NumSharedExperts},
		{"first_k_dense_replace", c.FirstKDenseReplace},
	}
	for _, f := range nonNegative {
		if f.v < 0 {
			return fmt.Errorf("%w: text_config.%s = %d: must not be negative", ErrConfig, f.field, f.v)
		}
	}
	if !(c.RMSNormEps > 0) {
		return fmt.Errorf("%w: text_config.rms_norm_eps = %g: must be positive", ErrConfig, c.RMSNormEps)
	}
	if c.NumKeyValueHeads != c.NumAttentionHeads {
		return fmt.Errorf("%w: text_config.num_key_value_heads = %d: MLA needs it equal to num_attention_heads = %d", ErrConfig, c.NumKeyValueHeads, c.NumAttentionHeads)
	}
	// The KDA width (linear_attn_config.num_heads x head_dim) and the MLA width (num_attention_heads x
	// v_head_dim) are independent: each kind has its own o_proj back to hidden_size. K3 happens to use
	// 12,288 for both; the architecture does not require it. A_log's stored length is the checkpoint's
	// (Plan.SetALogLen), at least num_heads.
	if !c.MLAUseNope {
		return fmt.Errorf("%w: text_config.mla_use_nope = false: K3's MLA has no rotary embedding; a rotary MLA is not supported", ErrConfig)
	}
	if !c.MLAUseOutputGate {
		return fmt.Errorf("%w: text_config.mla_use_output_gate = false: only the gated MLA of K3 is supported", ErrConfig)
	}
	if !c.LinearAttn.UseFullRankGate {
		return fmt.Errorf("%w: linear_attn_config.use_full_rank_gate = false: the low-rank output gate is Kimi Linear's, not K3's", ErrConfig)
	}
	if !(c.LinearAttn.GateLowerBound < 0) {
		return fmt.Errorf("%w: linear_attn_config.gate_lower_bound = %g: must be negative (K3: -5)", ErrConfig, c.LinearAttn.GateLowerBound)
	}
	if err := checkLayerLists(c.NumHiddenLayers, c.LinearAttn.KDALayers, c.LinearAttn.FullAttnLayers); err != nil {
		return err
	}
	if c.FirstKDenseReplace > c.NumHiddenLayers {
		return fmt.Errorf("%w: text_config.first_k_dense_replace = %d exceeds num_hidden_layers = %d", ErrConfig, c.FirstKDenseReplace, c.NumHiddenLayers)
	}
	if c.MoELayerFreq != 1 {
		return fmt.Errorf("%w: text_config.moe_layer_freq = %d: only 1 (every layer after the dense ones) is supported", ErrConfig, c.MoELayerFreq)
	}
	if c.NumExpertsPerToken > c.NumExperts {
		return fmt.Errorf("%w: text_config.num_experts_per_token = %d exceeds num_experts = %d", ErrConfig, c.NumExpertsPerToken, c.NumExperts)
	}
	// MXFP4 packs two columns a byte and scales groups of 32 columns.
	for _, f := range []struct {
		field string
		v     int
	}{{"routed_expert_hidden_size", c.RoutedExpertHidden}, {"moe_intermediate_size", c.MoEIntermediateSize}} {
		if f.v%32 != 0 {
			return fmt.Errorf("%w: text_config.%s = %d: MXFP4 expert inputs need a multiple of 32", ErrConfig, f.field, f.v)
		}
	}
	choices := []struct {
		field, got, want string
	}{
		{"hidden_act", c.HiddenAct, "situ"},
		{"moe_router_activation_func", c.RouterActivation, "sigmoid"},
		{"topk_method", c.TopKMethod, "noaux_tc"},
	}
	for _, ch := range choices {
		if ch.got != ch.want {
			return fmt.Errorf("%w: text_config.%s = %q: only %q is supported", ErrConfig, ch.field, ch.got, ch.want)
		}
	}
	if c.NumExpertGroup != 1 || c.TopKGroup != 1 {
		return fmt.Errorf("%w: text_config.num_expert_group = %d, topk_group = %d: only ungrouped routing (1, 1) is supported", ErrConfig, c.NumExpertGroup, c.TopKGroup)
	}
	if !c.MoERenormalize {
		return fmt.Errorf("%w: text_config.moe_renormalize = false: K3 renormalises the chosen router weights", ErrConfig)
	}
	if !c.LatentMoEUseNorm {
		return fmt.Errorf("%w: text_config.latent_moe_use_norm = false: K3's Stable LatentMoE normalises the expert sum", ErrConfig)
	}
	if !(c.RoutedScalingFactor > 0) {
		return fmt.Errorf("%w: text_config.routed_scaling_factor = %g: must be positive", ErrConfig, c.RoutedScalingFactor)
	}
	if !(c.SiTUBeta > 0) || !(c.SiTULinearBeta > 0) {
		return fmt.Errorf("%w: text_config.activation_situ_beta = %g, activation_situ_linear_beta = %g: both must be positive", ErrConfig, c.SiTUBeta, c.SiTULinearBeta)
	}
	if c.TieWordEmbeddings {
		return fmt.Errorf("%w: text_config.tie_word_embeddings = true: K3 has an untied lm_head", ErrConfig)
	}
	if c.NumNextNPredict != 0 {
		return fmt.Errorf("%w: text_config.num_nextn_predict_layers = %d: multi-token prediction layers are not part of K3's release", ErrConfig, c.NumNextNPredict)
	}
	for _, f := range []struct {
		field string
		v     int
	}{{"bos_token_id", c.BOSTokenID}, {"eos_token_id", c.EOSTokenID}, {"pad_token_id", c.PadTokenID}} {
		if f.v < 0 || f.v >= c.VocabSize {
			return fmt.Errorf("%w: text_config.%s = %d: outside the vocabulary 0..%d", ErrConfig, f.field, f.v, c.VocabSize-1)
		}
	}
	return nil
}

// The largest layer and expert counts a config may give (sizeBounds). Each is more than ten times K3's
// (93 layers, 896 experts), so any model of the architecture fits; a config past them cannot be a
// checkpoint anyone can hold (a thousand K3 layers are 17 TB).
const (
	MaxLayers  = 1024  // text_config.num_hidden_layers at most
	MaxExperts = 16384 // text_config.num_experts at most
)

// sizeBound is one config number, the most the engine admits and K3's value (K3_SPEC.md section 1),
// which the refusal quotes so that the bound reads as headroom, not as a limit on the real model.
type sizeBound struct {
	field      string
	v, max, k3 int
}

// sizeBounds lists the upper bounds of text_config's sizes. Each admits K3 with at least ten times
// headroom. They also keep every tensor's element count far below what int64 byte counts hold (the
// largest, the fused shared experts' num_shared_experts x moe_intermediate_size x hidden_size, is at most
// 2^43).
func sizeBounds(c *TextConfig) []sizeBound {
	return []sizeBound{
		{"num_hidden_layers", c.NumHiddenLayers, MaxLayers, 93},
		{"num_experts", c.NumExperts, MaxExperts, 896},
		{"hidden_size", c.HiddenSize, 1 << 17, 7168},
		{"vocab_size", c.VocabSize, 1 << 24, 163840},
		{"num_attention_heads", c.NumAttentionHeads, 4096, 96},
		{"num_key_value_heads", c.NumKeyValueHeads, 4096, 96},
		{"q_lora_rank", c.QLoraRank, 1 << 16, 1536},
		{"kv_lora_rank", c.KVLoraRank, 1 << 16, 512},
		{"qk_nope_head_dim", c.QKNopeHeadDim, 4096, 128},
		{"qk_rope_head_dim", c.QKRopeHeadDim, 4096, 64},
		{"v_head_dim", c.VHeadDim, 4096, 128},
		{"linear_attn_config.head_dim", c.LinearAttn.HeadDim, 4096, 128},
		{"linear_attn_config.num_heads", c.LinearAttn.NumHeads, 4096, 96},
		{"linear_attn_config.short_conv_kernel_size", c.LinearAttn.ShortConvKernelSize, 256, 4},
		{"intermediate_size", c.IntermediateSize, 1 << 20, 33792},
		{"num_shared_experts", c.NumSharedExperts, 256, 2},
		{"moe_intermediate_size", c.MoEIntermediateSize, 1 << 18, 3072},
		{"routed_expert_hidden_size", c.RoutedExpertHidden, 1 << 17, 3584},
	}
}
