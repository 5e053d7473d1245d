package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
)

// ErrConfig marks every error about a model's config.json.
var ErrConfig = errors.New("model: config")

// File is config.json of a K3 model directory as released: the multimodal wrapper, of which the engine
// reads only the text tower.
type File struct {
	ModelType     string     `json:"model_type"`    // "kimi_k3": the only key the engine dispatches on
	Architectures []string   `json:"architectures"` // ["KimiK3ForConditionalGeneration"]
	TextConfig    TextConfig `json:"text_config"`
	// Quantization is kept for the audit only: which tensors are MXFP4 is decided by the name suffix
	// weight_packed, not by this block (K3_SPEC.md section 1).
	Quantization json.RawMessage `json:"quantization_config,omitempty"`
}

// TextConfig is the text_config block, with K3's spellings (num_experts_per_token, not _tok).
type TextConfig struct {
	ModelType           string           `json:"model_type"` // "kimi_linear" in K3: not routed on
	HiddenSize          int              `json:"hidden_size"`
	NumHiddenLayers     int              `json:"num_hidden_layers"`
	VocabSize           int              `json:"vocab_size"`
	RMSNormEps          float64          `json:"rms_norm_eps"`
	NumAttentionHeads   int              `json:"num_attention_heads"`
	NumKeyValueHeads    int              `json:"num_key_value_heads"`
	QLoraRank           int              `json:"q_lora_rank"`
	KVLoraRank          int              `json:"kv_lora_rank"`
	QKNopeHeadDim       int              `json:"qk_nope_head_dim"`
	QKRopeHeadDim       int              `json:"qk_rope_head_dim"` // the shared key slot; K3 applies no rotary embedding
	VHeadDim            int              `json:"v_head_dim"`
	MLAUseNope          bool             `json:"mla_use_nope"`
	MLAUseOutputGate    bool             `json:"mla_use_output_gate"`
	LinearAttn          LinearAttnConfig `json:"linear_attn_config"`
	IntermediateSize    int              `json:"intermediate_size"`
	FirstKDenseReplace  int              `json:"first_k_dense_replace"`
	MoELayerFreq        int              `json:"moe_layer_freq"`
	NumExperts          int              `json:"num_experts"`
	NumExpertsPerToken  int              `json:"num_experts_per_token"`
	NumSharedExperts    int              `json:"num_shared_experts"`
	MoEIntermediateSize int              `json:"moe_intermediate_size"`
	RoutedExpertHidden  int              `json:"routed_expert_hidden_size"` // the latent width experts run in
	LatentMoEUseNorm    bool             `json:"latent_moe_use_norm"`
	RouterActivation    string           `json:"moe_router_activation_func"`
	MoERenormalize      bool             `json:"moe_renormalize"`
	RoutedScalingFactor float64          `json:"routed_scaling_factor"`
	TopKMethod          string           `json:"topk_method"`
	NumExpertGroup      int              `json:"num_expert_group"`
	TopKGroup           int              `json:"topk_group"`
	HiddenAct           string           `json:"hidden_act"`
	SiTUBeta            float64          `json:"activation_situ_beta"`
	SiTULinearBeta      float64          `json:"activation_situ_linear_beta"`
	AttnResBlockSize    int              `json:"attn_res_block_size"`
	TieWordEmbeddings   bool             `json:"tie_word_embeddings"`
	NumNextNPredict     int              `json:"num_nextn_predict_layers"`
	BOSTokenID          int              `json:"bos_token_id"`
	EOSTokenID          int              `json:"eos_token_id"`
	PadTokenID          int              `json:"pad_token_id"`
	RopeTheta           float64          `json:"rope_theta,omitempty"` // present in the release and unused
}

// LinearAttnConfig is text_config.linear_attn_config. Its layer lists are 1-indexed.
type LinearAttnConfig struct {
	HeadDim             int     `json:"head_dim"`
	NumHeads            int     `json:"num_heads"`
	ShortConvKernelSize int     `json:"short_conv_kernel_size"`
	UseFullRankGate     bool    `json:"use_full_rank_gate"`
	GateLowerBound      float64 `json:"gate_lower_bound"`
	KDALayers           []int   `json:"kda_layers"`
	FullAttnLayers      []int   `json:"full_attn_layers"`
}

// ReadFile reads and validates dir/config.json and returns its layer plan.
func ReadFile(dir string) (*Plan, error) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// jsonWant names the JSON a field of Go type t takes, for a config.json value of the wrong type: encoding/json
// says "cannot unmarshal string into Go struct field TextConfig.text_config.num_hidden_layers of type int".
func jsonWant(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// jsonGot names what encoding/json found ("string", "number 7.5", "bool", "array", "object").
func jsonGot(v string) string {
	switch {
	case v == "array" || v == "object":
		return "an " + v
	case v == "bool":
		return "true or false"
	case strings.HasPrefix(v, "number "):
		return "the number " + strings.TrimPrefix(v, "number ")
	}
	return "a " + v
}

// Parse decodes config.json bytes, dispatches on the top-level model type and returns the layer plan.
func Parse(data []byte) (*Plan, error) {
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" { // valid JSON, a value of the wrong type
			return nil, fmt.Errorf("%w: %s: want %s, got %s", ErrConfig, te.Field, jsonWant(te.Type), jsonGot(te.Value))
		}
		return nil, fmt.Errorf("%w: malformed JSON: %v", ErrConfig, err)
	}
	switch f.ModelType {
	case "kimi_k3":
	case "kimi_linear":
		return nil, fmt.Errorf("%w: model_type %q is Kimi Linear, a different architecture (no AttnRes, no SiTU) that this engine does not replay", ErrConfig, f.ModelType)
	case "":
		return nil, fmt.Errorf("%w: model_type missing at the top level (want \"kimi_k3\")", ErrConfig)
	default:
		return nil, fmt.Errorf("%w: model_type %q not supported (want \"kimi_k3\")", ErrConfig, f.ModelType)
	}
	if len(f.Architectures) != 1 || f.Architectures[0] != "KimiK3ForConditionalGeneration" {
		return nil, fmt.Errorf("%w: architectures %q: want [\"KimiK3ForConditionalGeneration\"]", ErrConfig, f.Architectures)
	}
	return NewPlan(f.TextConfig)
}
