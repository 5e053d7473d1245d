package model

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

// k3File is config.json as released, for tests to edit.
func k3File() File {
	return File{ModelType: "kimi_k3", Architectures: []string{"KimiK3ForConditionalGeneration"}, TextConfig: K3TextConfig()}
}

func TestK3Plan(t *testing.T) {
	raw, err := json.Marshal(k3File())
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Count(KDA, Dense); got != 1 {
		t.Errorf("KDA+dense layers: %d, want 1", got)
	}
	if got := p.Count(KDA, MoE); got != 68 {
		t.Errorf("KDA+MoE layers: %d, want 68", got)
	}
	if got := p.Count(MLA, MoE); got != 24 {
		t.Errorf("MLA+MoE layers: %d, want 24", got)
	}
	var want []int
	for l := 3; l < 91; l += 4 {
		want = append(want, l)
	}
	want = append(want, 91, 92)
	if got := p.LayerIndices(MLA); !slices.Equal(got, want) {
		t.Errorf("MLA layers (0-indexed) = %v, want %v", got, want)
	}
	var starts []int
	for _, l := range p.Layers {
		if l.BlockStart {
			starts = append(starts, l.Index)
		}
	}
	if !slices.Equal(starts, []int{0, 12, 24, 36, 48, 60, 72, 84}) {
		t.Errorf("AttnRes block starts = %v", starts)
	}
	if p.MaxBlocks() != 8 {
		t.Errorf("MaxBlocks = %d, want 8 (8 blocks + p = 9 vectors mixed at most)", p.MaxBlocks())
	}
	var n, bytes int64
	for _, s := range p.Tensors() {
		n++
		bytes += s.Bytes()
	}
	// K3_SPEC.md: 497,220 tensors in all, 168 of them vision; 1,560,860,324,864 bytes, of which the
	// vision tower's 894,717,952 are not part of the text manifest.
	if n != 497_220-168 {
		t.Errorf("text tensors: %d, want %d", n, 497_220-168)
	}
	if bytes != 1_560_860_324_864-894_717_952 {
		t.Errorf("text bytes: %d", bytes)
	}
	if _, experts := p.LayerBytes(1); experts/896 != 17_547_264 {
		t.Errorf("one expert: %d bytes, want 17,547,264", experts/896)
	}
}

func TestConfigRefusals(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(f *File)
		field string // the message must name it
	}{
		{"model type kimi_linear", func(f *File) { f.ModelType = "kimi_linear" }, "Kimi Linear"},
		{"model type missing", func(f *File) { f.ModelType = "" }, "model_type"},
		{"model type other", func(f *File) { f.ModelType = "llama" }, "llama"},
		{"architectures", func(f *File) { f.Architectures = []string{"KimiLinearForCausalLM"} }, "architectures"},
		{"hidden size", func(f *File) { f.TextConfig.HiddenSize = 0 }, "hidden_size"},
		{"eps", func(f *File) { f.TextConfig.RMSNormEps = 0 }, "rms_norm_eps"},
		{"kv heads", func(f *File) { f.TextConfig.NumKeyValueHeads = 8 }, "num_key_value_heads"},
		{"layer listed twice", func(f *File) {
			f.TextConfig.LinearAttn.KDALayers = append(f.TextConfig.LinearAttn.KDALayers, 4)
		}, "layer 4 is in both"},
		{"layer missing", func(f *File) {
			f.TextConfig.LinearAttn.FullAttnLayers = f.TextConfig.LinearAttn.FullAttnLayers[1:]
		}, "layers [4]"},
		{"layer out of range", func(f *File) {
			f.TextConfig.LinearAttn.FullAttnLayers = append(f.TextConfig.LinearAttn.FullAttnLayers, 94)
		}, "outside 1..93"},
		{"zero-indexed list", func(f *File) { f.TextConfig.LinearAttn.KDALayers[0] = 0 }, "1-indexed"},
		{"duplicate in one list", func(f *File) {
			l := f.TextConfig.LinearAttn.KDALayers
			l[1] = l[0]
		}, "listed twice"},
		{"activation", func(f *File) { f.TextConfig.HiddenAct = "silu" }, "hidden_act"},
		{"router", func(f *File) { f.TextConfig.RouterActivation = "softmax" }, "moe_router_activation_func"},
		{"top-k method", func(f *File) { f.TextConfig.TopKMethod = "greedy" }, "topk_method"},
		{"experts per token", func(f *File) { f.TextConfig.NumExpertsPerToken = 1000 }, "num_experts_per_token"},
		{"mxfp4 width", func(f *File) { f.TextConfig.MoEIntermediateSize = 3000 }, "moe_intermediate_size"},
		{"expert groups", func(f *File) { f.TextConfig.NumExpertGroup = 8 }, "num_expert_group"},
		{"rotary mla", func(f *File) { f.TextConfig.MLAUseNope = false }, "mla_use_nope"},
		{"low-rank gate", func(f *File) { f.TextConfig.LinearAttn.UseFullRankGate = false }, "use_full_rank_gate"},
		{"gate bound", func(f *File) { f.TextConfig.LinearAttn.GateLowerBound = 0 }, "gate_lower_bound"},
		{"tied embeddings", func(f *File) { f.TextConfig.TieWordEmbeddings = true }, "tie_word_embeddings"},
		{"mtp layers", func(f *File) { f.TextConfig.NumNextNPredict = 1 }, "num_nextn_predict_layers"},
		{"bos outside vocab", func(f *File) { f.TextConfig.BOSTokenID = 163840 }, "bos_token_id"},
		{"dense layers past the end", func(f *File) { f.TextConfig.FirstKDenseReplace = 94 }, "first_k_dense_replace"},
		{"moe frequency", func(f *File) { f.TextConfig.MoELayerFreq = 2 }, "moe_layer_freq"},
		{"block size", func(f *File) { f.TextConfig.AttnResBlockSize = 0 }, "attn_res_block_size"},
		{"situ beta", func(f *File) { f.TextConfig.SiTUBeta = 0 }, "activation_situ_beta"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := k3File()
			f.TextConfig.LinearAttn.KDALayers = slices.Clone(f.TextConfig.LinearAttn.KDALayers)
			f.TextConfig.LinearAttn.FullAttnLayers = slices.Clone(f.TextConfig.LinearAttn.FullAttnLayers)
			tc.edit(&f)
			raw, err := json.Marshal(f)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(raw)
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("error %v does not wrap ErrConfig", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %q", err, tc.field)
			}
		})
	}
}

func TestParseMalformed(t *testing.T) {
	for _, in := range []string{"", "{", "[]", `{"model_type": 3}`, `{"model_type": "kimi_k3", "text_config": "x"}`} {
		if _, err := Parse([]byte(in)); err == nil || !errors.Is(err, ErrConfig) {
			t.Errorf("Parse(%q) = %v, want an ErrConfig", in, err)
		}
	}
}

// A value of the wrong JSON type names its field in config.json's terms, not encoding/json's Go ones
// ("cannot unmarshal string into Go struct field TextConfig.text_config.num_hidden_layers of type int").
func TestParseWrongType(t *testing.T) {
	for _, tt := range []struct {
		field string // a key of text_config, or of linear_attn_config after "linear_attn_config."
		value any
		want  string
	}{
		{"num_hidden_layers", "8", "model: config: text_config.num_hidden_layers: want an integer, got a string"},
		{"hidden_size", 7168.5, "model: config: text_config.hidden_size: want an integer, got the number 7168.5"},
		{"rms_norm_eps", "1e-5", "text_config.rms_norm_eps: want a number, got a string"},
		{"mla_use_nope", 1, "text_config.mla_use_nope: want true or false, got a number"},
		{"hidden_act", []int{1}, "text_config.hidden_act: want a string, got an array"},
		{"linear_attn_config.kda_layers", "1,2", "text_config.linear_attn_config.kda_layers: want an array, got a string"},
		{"linear_attn_config", true, "text_config.linear_attn_config: want an object, got true or false"},
	} {
		var f map[string]any
		raw, _ := json.Marshal(k3File())
		json.Unmarshal(raw, &f)
		tc := f["text_config"].(map[string]any)
		if parent, key, ok := strings.Cut(tt.field, "."); ok {
			tc[parent].(map[string]any)[key] = tt.value
		} else {
			tc[tt.field] = tt.value
		}
		raw, _ = json.Marshal(f)
		_, err := Parse(raw)
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "Go ") {
			t.Errorf("%s = %v: -want …%s… +got %v", tt.field, tt.value, tt.want, err)
		}
	}
}

// FuzzParse: no input makes the config parser panic, and anything it accepts has a consistent plan.
func FuzzParse(f *testing.F) {
	raw, _ := json.Marshal(k3File())
	f.Add(raw)
	f.Add([]byte(`{"model_type":"kimi_k3"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			return
		}
		if len(p.Layers) != p.Config.NumHiddenLayers {
			t.Fatalf("plan has %d layers for num_hidden_layers %d", len(p.Layers), p.Config.NumHiddenLayers)
		}
	})
}

// The architecture, not K3's numbers: KDA and MLA widths may differ (each attention kind has its own
// o_proj), more KDA heads than head_dim is fine, and A_log may be padded past num_heads to any length
// (the reference loader pads to a multiple of 128); only fewer than num_heads entries, or another rank,
// is refused.
func TestArchitectureNotK3Numbers(t *testing.T) {
	c := K3TextConfig()
	c.LinearAttn.NumHeads, c.LinearAttn.HeadDim = 192, 64 // KDA width 12,288 at head_dim 64: heads > head_dim
	c.VHeadDim = 64                                       // MLA width 96 x 64 = 6,144, not the KDA width
	p, err := NewPlan(c)
	if err != nil {
		t.Fatalf("NewPlan refused an architecture-valid config: %v", err)
	}
	if d := p.Dims(); d.KDAWidth != 12288 || d.MLAHeads*d.VHead != 6144 || d.ALogLen != 192 {
		t.Errorf("dims: KDA width %d, MLA width %d, A_log %d", d.KDAWidth, d.MLAHeads*d.VHead, d.ALogLen)
	}
	name := p.FirstKDAALog()
	for _, tt := range []struct {
		shape []int64
		want  int    // the A_log length taken
		err   string // "" when accepted
	}{
		{nil, 192, ""},
		{[]int64{192}, 192, ""},
		{[]int64{256}, 256, ""}, // padded to a multiple of 128
		{[]int64{128}, 0, "want [n] F32 with n >= 192 (linear_attn_config.num_heads; the rest padding), got [128]"},
		{[]int64{1, 256}, 0, "got [1 256]"},
	} {
		p.ALogLen = 0
		err := p.SetALogLen(name, tt.shape)
		switch {
		case tt.err == "" && (err != nil || p.Dims().ALogLen != tt.want):
			t.Errorf("A_log %v: -want length %d +got %d, %v", tt.shape, tt.want, p.Dims().ALogLen, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), name)):
			t.Errorf("A_log %v: -want an error naming %s …%s… +got %v", tt.shape, name, tt.err, err)
		}
	}
	for _, s := range p.LayerTensors(0) {
		if strings.HasSuffix(s.Name, "self_attn.o_proj.weight") && s.Shape[1] != 12288 {
			t.Errorf("KDA o_proj %v, want [7168 12288]", s.Shape)
		}
	}
	for i, l := range p.Layers {
		if l.Attn != MLA {
			continue
		}
		for _, s := range p.LayerTensors(i) {
			if strings.HasSuffix(s.Name, "self_attn.o_proj.weight") && s.Shape[1] != 6144 {
				t.Errorf("MLA o_proj %v, want [7168 6144]", s.Shape)
			}
		}
		break
	}
}
