package model

import (
	"fmt"
)

// AttnKind is the token-mixing sublayer of a layer.
type AttnKind uint8

// The two attention kinds of K3.
const (
	KDA AttnKind = iota // Kimi Delta Attention: a gated delta-rule linear recurrence (K3_SPEC.md 5.2)
	MLA                 // gated multi-head latent attention with no positional encoding (K3_SPEC.md 5.3)
)

func (k AttnKind) String() string {
	if k == MLA {
		return "mla"
	}
	return "kda"
}

// FFNKind is the channel-mixing sublayer of a layer.
type FFNKind uint8

// The two FFN kinds of K3.
const (
	Dense FFNKind = iota // a SiTU-GLU FFN (layer 0)
	MoE                  // Stable LatentMoE: routed MXFP4 experts in a latent width plus shared experts
)

func (k FFNKind) String() string {
	if k == MoE {
		return "moe"
	}
	return "dense"
}

// Layer is one layer of the plan, 0-indexed.
type Layer struct {
	Index int
	Attn  AttnKind
	FFN   FFNKind
	// BlockStart is true where the layer banks the running sum as a completed AttnRes block vector before its
	// attention (i % attn_res_block_size == 0; layer 0 banks the embedding).
	BlockStart bool
	// Blocks is the number of completed block vectors in the list B while this layer runs (after banking).
	Blocks int
}

// Plan is a validated text config and what it implies for every layer.
type Plan struct {
	Config TextConfig
	Layers []Layer
	// ALogLen is A_log's stored length (SetALogLen); 0 means the default, head_dim.
	ALogLen int
}

// NewPlan validates c and derives the layer plan. Every refusal names the config field at fault.
func NewPlan(c TextConfig) (*Plan, error) {
	if err := validate(&c); err != nil {
		return nil, err
	}
	mla := make(map[int]bool, len(c.LinearAttn.FullAttnLayers))
	for _, l := range c.LinearAttn.FullAttnLayers {
		mla[l-1] = true
	}
	p := &Plan{Config: c, Layers: make([]Layer, c.NumHiddenLayers)}
	blocks := 0
	for i := range p.Layers {
		l := Layer{Index: i, Attn: KDA, FFN: MoE}
		if mla[i] {
			l.Attn = MLA
		}
		if i < c.FirstKDenseReplace {
			l.FFN = Dense
		}
		if i%c.AttnResBlockSize == 0 {
			l.BlockStart = true
			blocks++
		}
		l.Blocks = blocks
		p.Layers[i] = l
	}
	return p, nil
}

// MaxBlocks is the largest number of completed block vectors any layer holds: the per-token state is that
// many vectors plus the running sum.
func (p *Plan) MaxBlocks() int { return p.Layers[len(p.Layers)-1].Blocks }

// Count returns how many layers have the given attention and FFN kinds.
func (p *Plan) Count(a AttnKind, f FFNKind) int {
	n := 0
	for _, l := range p.Layers {
		if l.Attn == a && l.FFN == f {
			n++
		}
	}
	return n
}

// MoELayers is the number of layers with an MoE FFN.
func (p *Plan) MoELayers() int { return p.Count(KDA, MoE) + p.Count(MLA, MoE) }

// LayerIndices returns the 0-indexed layers of the given attention kind, ascending.
func (p *Plan) LayerIndices(a AttnKind) []int {
	var out []int
	for _, l := range p.Layers {
		if l.Attn == a {
			out = append(out, l.Index)
		}
	}
	return out
}

// maxListedLayers bounds the layer numbers one message lists; the rest are counted ("and N more").
const maxListedLayers = 10

// checkLayerLists verifies that kda_layers and full_attn_layers (1-indexed) partition 1..n. Its memory
// follows the lists' lengths (what config.json holds), never n: validate bounds n before, and the
// message about layers in neither list names the first few and counts the rest.
func checkLayerLists(n int, kda, full []int) error {
	owner := make(map[int]string, len(kda)+len(full))
	for _, list := range []struct {
		field string
		ids   []int
	}{{"linear_attn_config.kda_layers", kda}, {"linear_attn_config.full_attn_layers", full}} {
		for _, id := range list.ids {
			if id < 1 || id > n {
				return fmt.Errorf("%w: %s: layer %d outside 1..%d (the lists are 1-indexed)", ErrConfig, list.field, id, n)
			}
			if prev, dup := owner[id]; dup {
				if prev == list.field {
					return fmt.Errorf("%w: %s: layer %d listed twice", ErrConfig, list.field, id)
				}
				return fmt.Errorf("%w: layer %d is in both %s and %s", ErrConfig, id, prev, list.field)
			}
			owner[id] = list.field
		}
	}
	if len(kda)+len(full) != n {
		// Every listed id is in 1..n and distinct, so n - len(owner) layers are in neither list.
		missing, more := []int{}, n-len(owner)
		for i := 1; i <= n && len(missing) < maxListedLayers; i++ {
			if _, ok := owner[i]; !ok {
				missing = append(missing, i)
			}
		}
		more -= len(missing)
		rest := ""
		if more > 0 {
			rest = fmt.Sprintf(" and %d more", more)
		}
		return fmt.Errorf("%w: linear_attn_config: layers %v%s (1-indexed) are in neither kda_layers nor full_attn_layers; num_hidden_layers is %d", ErrConfig, missing, rest, n)
	}
	return nil
}
