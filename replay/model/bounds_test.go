package model

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

// consistentLists sets num_hidden_layers to n with layer lists that cover 1..n, so that only the size
// itself can be at fault.
func consistentLists(f *File, n int) {
	f.TextConfig.NumHiddenLayers = n
	f.TextConfig.LinearAttn.KDALayers, f.TextConfig.LinearAttn.FullAttnLayers = nil, nil
	for l := 1; l <= n; l++ {
		if l%4 == 0 {
			f.TextConfig.LinearAttn.FullAttnLayers = append(f.TextConfig.LinearAttn.FullAttnLayers, l)
		} else {
			f.TextConfig.LinearAttn.KDALayers = append(f.TextConfig.LinearAttn.KDALayers, l)
		}
	}
}

// Absurd sizes in config.json are refused by name, before anything is sized by them (a num_hidden_layers
// of 1e9 made a billion-entry plan and ran out of memory); sizes up to the bounds, far past K3's, pass.
func TestConfigBounds(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(f *File)
		field string // "" when accepted
	}{
		{"layers 1e9, K3's lists", func(f *File) { f.TextConfig.NumHiddenLayers = 1e9 }, "text_config.num_hidden_layers = 1000000000"},
		{"layers 100,000, lists consistent", func(f *File) { consistentLists(f, 100_000) }, "text_config.num_hidden_layers = 100000"},
		{"layers at the bound", func(f *File) { consistentLists(f, MaxLayers) }, ""},
		{"layers past the bound", func(f *File) { consistentLists(f, MaxLayers+1) }, "num_hidden_layers = 1025: more than the 1024"},
		{"experts 1e9", func(f *File) { f.TextConfig.NumExperts = 1e9 }, "text_config.num_experts = 1000000000"},
		{"experts at the bound", func(f *File) { f.TextConfig.NumExperts = MaxExperts }, ""},
		{"hidden", func(f *File) { f.TextConfig.HiddenSize = 1 << 30 }, "text_config.hidden_size"},
		{"vocabulary", func(f *File) { f.TextConfig.VocabSize = 1 << 30 }, "text_config.vocab_size"},
		{"heads", func(f *File) {
			f.TextConfig.NumAttentionHeads, f.TextConfig.NumKeyValueHeads = 1<<20, 1<<20
		}, "text_config.num_attention_heads"},
		{"kda heads", func(f *File) { f.TextConfig.LinearAttn.NumHeads = 1 << 20 }, "text_config.linear_attn_config.num_heads"},
		{"rope slot", func(f *File) { f.TextConfig.QKRopeHeadDim = 1 << 20 }, "text_config.qk_rope_head_dim"},
		{"dense width", func(f *File) { f.TextConfig.IntermediateSize = 1 << 30 }, "text_config.intermediate_size"},
		{"expert width", func(f *File) { f.TextConfig.MoEIntermediateSize = 1 << 30 }, "text_config.moe_intermediate_size"},
		{"shared experts", func(f *File) { f.TextConfig.NumSharedExperts = 1e6 }, "text_config.num_shared_experts"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := k3File()
			tc.edit(&f)
			raw, err := json.Marshal(f)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Parse(raw)
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.field == "" && len(p.Layers) != f.TextConfig.NumHiddenLayers:
				t.Errorf("%d layers planned, want %d", len(p.Layers), f.TextConfig.NumHiddenLayers)
			case tc.field != "" && (err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.field)):
				t.Errorf("-want an ErrConfig naming …%s… +got %v", tc.field, err)
			case tc.field != "" && !strings.Contains(err.Error(), "(K3: "):
				t.Errorf("the refusal does not quote K3's value: %v", err)
			}
		})
	}
}

// The message about layers in neither list names the first few and counts the rest, instead of every
// one of up to num_hidden_layers numbers.
func TestLayerListsMissingCapped(t *testing.T) {
	for _, tc := range []struct {
		name      string
		n, listed int
		want      string
	}{
		{"one missing", 8, 7, "layers [8] (1-indexed)"},
		{"ten missing", 20, 10, "layers [11 12 13 14 15 16 17 18 19 20] (1-indexed)"},
		{"many missing", 1000, 10, "layers [11 12 13 14 15 16 17 18 19 20] and 980 more (1-indexed)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var kda []int
			for l := 1; l <= tc.listed; l++ {
				kda = append(kda, l)
			}
			err := checkLayerLists(tc.n, kda, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("-want …%s… +got %v", tc.want, err)
			}
			if err != nil && len(err.Error()) > 300 {
				t.Errorf("message of %d bytes: %s", len(err.Error()), err)
			}
		})
	}
}

// TensorCount is the length of Tensors, and of its experts' part, without building the list.
func TestTensorCount(t *testing.T) {
	small := K3TextConfig()
	small.NumExperts, small.NumExpertsPerToken = 3, 2
	wide := K3TextConfig()
	wide.FirstKDenseReplace = 5
	for _, tc := range []struct {
		name string
		c    TextConfig
	}{{"k3", K3TextConfig()}, {"3 experts", small}, {"5 dense layers", wide}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.LinearAttn.KDALayers = slices.Clone(tc.c.LinearAttn.KDALayers)
			p, err := NewPlan(tc.c)
			if err != nil {
				t.Fatal(err)
			}
			var experts int64
			specs := p.Tensors()
			for _, s := range specs {
				if strings.Contains(s.Name, ".experts.") {
					experts++
				}
			}
			total, gotExperts := p.TensorCount()
			if total != int64(len(specs)) || gotExperts != experts {
				t.Errorf("TensorCount: -want %d, %d +got %d, %d", len(specs), experts, total, gotExperts)
			}
		})
	}
}
