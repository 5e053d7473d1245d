package synth

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
)

// The small files of a model directory: config.json and model.safetensors.index.json.

// configFile is config.json as released: model.File (the part the engine reads) plus the blocks a real
// release carries that the engine ignores, and a record of how the directory was made.
type configFile struct {
	model.File
	VisionConfig visionConfig      `json:"vision_config"`
	TorchDType   string            `json:"torch_dtype"`
	AutoMap      map[string]string `json:"auto_map"`
	Synthetic    syntheticInfo     `json:"potato_synth"`
}

// visionConfig describes the synthetic image tower (see vision.go): plausible MoonViT keys, not K3's.
type visionConfig struct {
	ModelType         string `json:"model_type"`
	HiddenSize        int    `json:"hidden_size"`
	IntermediateSize  int    `json:"intermediate_size"`
	NumHiddenLayers   int    `json:"num_hidden_layers"`
	NumAttentionHeads int    `json:"num_attention_heads"`
	PatchSize         int    `json:"patch_size"`
	PosEmbHeight      int    `json:"init_pos_emb_height"`
	PosEmbWidth       int    `json:"init_pos_emb_width"`
	MergeKernelSize   [2]int `json:"merge_kernel_size"`
	ProjectorHidden   int    `json:"mm_hidden_size"`
	TextHiddenSize    int    `json:"text_hidden_size"`
}

// syntheticInfo marks the directory as synthetic: a reader can tell it from the release, and a
// directory can be regenerated from it.
type syntheticInfo struct {
	Preset string `json:"preset"`
	Seed   uint64 `json:"seed"`
	Note   string `json:"note"`
}

// quantizationConfig is a compressed-tensors block in the shape of the release's: MXFP4 (E2M1 codes,
// E8M0 scales per 32 columns) for the routed experts only. The engine decides by the tensor-name suffix
// weight_packed, never by this block (K3_SPEC.md section 1).
const quantizationConfig = `{
  "quant_method": "compressed-tensors",
  "format": "mxfp4-pack-quantized",
  "quantization_status": "compressed",
  "config_groups": {
    "group_0": {
      "targets": ["re:.*block_sparse_moe\\.experts\\.\\d+\\.w[123]$"],
      "format": "mxfp4-pack-quantized",
      "weights": {"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32,
                  "symmetric": true, "dynamic": false, "scale_dtype": "e8m0", "observer": "minmax"},
      "input_activations": null,
      "output_activations": null
    }
  },
  "ignore": ["language_model.lm_head", "re:vision_tower.*", "re:mm_projector.*", "re:.*self_attn.*",
             "re:.*shared_experts.*", "re:.*mlp\\..*", "re:.*block_sparse_moe\\.gate$",
             "re:.*routed_expert_(up|down)_proj$"],
  "kv_cache_scheme": null
}`

// configJSON renders config.json for the layout.
func (l *Layout) configJSON() ([]byte, error) {
	v := l.Preset.vision
	var q json.RawMessage
	if err := json.Unmarshal([]byte(quantizationConfig), &q); err != nil {
		return nil, fmt.Errorf("synth: quantization_config: %w", err)
	}
	c := configFile{
		File: model.File{
			ModelType: "kimi_k3", Architectures: []string{"KimiK3ForConditionalGeneration"},
			TextConfig: l.Plan.Config, Quantization: q,
		},
		VisionConfig: visionConfig{
			ModelType: "moonvit", HiddenSize: v.Width, IntermediateSize: v.MLP, NumHiddenLayers: v.Blocks,
			NumAttentionHeads: max(1, v.Width/72), PatchSize: v.Patch, PosEmbHeight: v.PosGrid,
			PosEmbWidth: v.PosGrid, MergeKernelSize: [2]int{2, 2}, ProjectorHidden: v.MergedHidden,
			TextHiddenSize: l.Plan.Config.HiddenSize,
		},
		TorchDType: "bfloat16",
		AutoMap: map[string]string{
			"AutoConfig":           "configuration_kimi_k3.KimiK3Config",
			"AutoModel":            "modeling_kimi_k3.KimiK3ForConditionalGeneration",
			"AutoModelForCausalLM": "modeling_kimi_k3.KimiK3ForConditionalGeneration",
		},
		Synthetic: syntheticInfo{Preset: l.Preset.Name, Seed: l.Seed,
			Note: "synthetic weights in the official format, written by potato synth; not Kimi K3"},
	}
	out, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("synth: config.json: %w", err)
	}
	return append(out, '\n'), nil
}

// writeIndex writes model.safetensors.index.json: metadata.total_size (tensor data bytes, as
// transformers writes it) and the weight_map, sorted by name as transformers sorts it. Streamed: K3's
// map has 497,220 entries.
func (l *Layout) writeIndex(dir string) (err error) {
	path := filepath.Join(dir, checkpoint.IndexFile)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	type entry struct{ name, file string }
	var entries []entry
	for _, sh := range l.Shards {
		for _, t := range sh.Tensors {
			entries = append(entries, entry{t.Name, sh.File})
		}
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	_, total := l.Totals()
	w := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintf(w, "{\n  \"metadata\": {\n    \"total_size\": %d\n  },\n  \"weight_map\": {", total)
	for i, e := range entries {
		if i > 0 {
			w.WriteByte(',')
		}
		w.WriteString("\n    ")
		w.WriteString(strconv.Quote(e.name))
		w.WriteString(": ")
		w.WriteString(strconv.Quote(e.file))
	}
	w.WriteString("\n  }\n}\n")
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Sync()
}
