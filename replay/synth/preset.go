package synth

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// ErrPreset marks a request for a preset or a layer count that does not exist.
var ErrPreset = errors.New("synth: preset")

// Preset is a named model shape. Everything but the shape (the values of the weights) comes from the seed.
type Preset struct {
	Name    string
	Summary string
	// Layers is the default number of layers; Options.Layers overrides it where FixedLayers is false.
	Layers      int
	FixedLayers bool
	// NeedsSparse presets are too large for most disks: Write refuses them without Options.Sparse unless
	// the free space suffices.
	NeedsSparse bool
	// text returns the text config for n layers, before the layer lists are filled in.
	text func(n int) model.TextConfig
	// shards is the number of shard files for a text config (the official release has 96).
	shards func(c model.TextConfig, totalBytes int64) int
	// vision is the layout of the synthetic image tower.
	vision visionShape
	// numBPE is the number of byte-level BPE tokens; the vocabulary is numBPE + tokenizer.NumSpecials.
	numBPE int
	// aLogPad, when not 0, stores A_log padded to a multiple of this many entries (the reference loader
	// pads to 128), instead of K3's head_dim entries.
	aLogPad int
}

// officialShardBytes is the mean shard size of the release (1,560,860,324,864 bytes in 96 shards): the
// k3-layer preset splits its data into shards of about this size.
const officialShardBytes = 1_560_860_324_864 / 96

// Presets returns the presets, smallest first.
func Presets() []Preset {
	fixed := func(n int) func(model.TextConfig, int64) int { return func(model.TextConfig, int64) int { return n } }
	return []Preset{
		{
			Name:    "tiny",
			Summary: "8 layers, hidden 128, 16 experts (4 active), 3,328-token vocabulary: a few MB, seconds on a CPU",
			Layers:  8, text: tinyText, shards: fixed(4), vision: smallVision, numBPE: 3072,
		},
		{
			Name: "tiny-wide",
			Summary: "tiny with a KDA width (8 heads x 32) twice the MLA width (4 x 32) and A_log padded to 128, " +
				"as a checkpoint of another K3-architecture model may be: validation follows the architecture",
			Layers: 8, text: tinyWideText, shards: fixed(4), vision: smallVision, numBPE: 3072, aLogPad: 128,
		},
		{
			Name:    "small",
			Summary: "12 layers, hidden 512, 64 experts (8 active), 33,024-token vocabulary: about 200 MB, a CPU benchmark",
			Layers:  12, text: smallText, shards: fixed(8), vision: smallVision, numBPE: 32768,
		},
		{
			Name:    "k3-layer",
			Summary: "K3's real dimensions and vocabulary for --layers N layers (default 4: KDA+dense, KDA+MoE, MLA+MoE, MLA+MoE; three or more hold every kind): GPU benchmarks",
			Layers:  4, text: k3Text, shards: byteShards, vision: smallVision, numBPE: 163584,
		},
		{
			Name:        "k3-full",
			Summary:     "the whole release shape: 93 layers, 497,220 tensors, 1,560,860,324,864 bytes (use --sparse)",
			Layers:      93,
			FixedLayers: true, NeedsSparse: true,
			text: k3Text, shards: fixed(96), vision: k3Vision, numBPE: 163584,
		},
	}
}

// LookupPreset returns the preset called name.
func LookupPreset(name string) (Preset, error) {
	var names []string
	for _, p := range Presets() {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	return Preset{}, fmt.Errorf("%w: unknown preset %q (have %s)", ErrPreset, name, strings.Join(names, ", "))
}

// TextConfig returns the preset's text_config for n layers (0: the default), with the K3 layer pattern:
// MLA at every fourth layer (1-indexed) and at the last two, never at 0-indexed layers 0 and 1, so that
// three or more layers contain all three kinds (KDA+dense, KDA+MoE, MLA+MoE). For 93 layers this is K3's
// own list.
func (p Preset) TextConfig(n int) (model.TextConfig, error) {
	switch {
	case n == 0:
		n = p.Layers
	case n < 0:
		return model.TextConfig{}, fmt.Errorf("%w: %s: %d layers", ErrPreset, p.Name, n)
	case n > model.MaxLayers: // refused before the layer lists are built: they take n entries
		return model.TextConfig{}, fmt.Errorf("%w: %s: %d layers: more than the %d a model may have (model.MaxLayers; K3 has 93)", ErrPreset, p.Name, n, model.MaxLayers)
	case p.FixedLayers && n != p.Layers:
		return model.TextConfig{}, fmt.Errorf("%w: %s always has %d layers (use k3-layer for fewer)", ErrPreset, p.Name, p.Layers)
	}
	c := p.text(n)
	c.NumHiddenLayers = n
	c.LinearAttn.KDALayers, c.LinearAttn.FullAttnLayers = layerLists(n)
	c.VocabSize = p.numBPE + tokenizer.NumSpecials
	// The special ids sit at K3's offsets from the first special slot (K3_SPEC.md section 6).
	c.BOSTokenID = p.numBPE       // [BOS]
	c.EOSTokenID = p.numBPE + 2   // <|end_of_msg|>, the stop token, as text_config.eos_token_id in K3
	c.PadTokenID = p.numBPE + 255 // [PAD]
	return c, nil
}

// layerLists returns kda_layers and full_attn_layers (1-indexed) for n layers.
func layerLists(n int) (kda, full []int) {
	for l := 1; l <= n; l++ {
		if l >= 3 && (l%4 == 0 || l >= n-1) {
			full = append(full, l)
		} else {
			kda = append(kda, l)
		}
	}
	return kda, full
}

// byteShards splits the data into shards of about the official mean size.
func byteShards(_ model.TextConfig, total int64) int {
	return max(1, int(math.Round(float64(total)/officialShardBytes)))
}

// k3Text is the released text config; TextConfig sets the layer count and lists.
func k3Text(int) model.TextConfig { return model.K3TextConfig() }

// tinyText scales K3 down to a model that runs in milliseconds a token on a CPU. Widths are multiples of 32
// (MXFP4 groups) and every tensor's byte size is a multiple of 8, so data offsets stay 8-byte aligned.
// MLA heads equal KDA heads and v_head_dim equals the KDA head_dim, as in K3 (one o_proj input width).
func tinyText(int) model.TextConfig {
	c := model.K3TextConfig()
	c.HiddenSize = 128
	c.NumAttentionHeads, c.NumKeyValueHeads = 4, 4
	c.QLoraRank, c.KVLoraRank = 64, 32
	c.QKNopeHeadDim, c.QKRopeHeadDim, c.VHeadDim = 32, 16, 32
	c.LinearAttn.NumHeads, c.LinearAttn.HeadDim = 4, 32
	c.IntermediateSize = 256
	c.NumExperts, c.NumExpertsPerToken, c.NumSharedExperts = 16, 4, 1
	c.MoEIntermediateSize, c.RoutedExpertHidden = 64, 64
	c.AttnResBlockSize = 3
	return c
}

// tinyWideText is tinyText with twice the KDA heads: the KDA width (256) and the MLA width (128) differ,
// which the architecture allows (each attention kind has its own o_proj) and K3 does not use.
func tinyWideText(n int) model.TextConfig {
	c := tinyText(n)
	c.LinearAttn.NumHeads = 8
	return c
}

// smallText is a CPU benchmark: real work per token, several AttnRes blocks, a realistic vocabulary.
func smallText(int) model.TextConfig {
	c := model.K3TextConfig()
	c.HiddenSize = 512
	c.NumAttentionHeads, c.NumKeyValueHeads = 8, 8
	c.QLoraRank, c.KVLoraRank = 256, 128
	c.QKNopeHeadDim, c.QKRopeHeadDim, c.VHeadDim = 64, 32, 64
	c.LinearAttn.NumHeads, c.LinearAttn.HeadDim = 8, 64
	c.IntermediateSize = 1536
	c.NumExperts, c.NumExpertsPerToken, c.NumSharedExperts = 64, 8, 2
	c.MoEIntermediateSize, c.RoutedExpertHidden = 256, 256
	c.AttnResBlockSize = 4
	return c
}
