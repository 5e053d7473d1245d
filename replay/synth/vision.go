package synth

import (
	"fmt"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
)

// The image path of the release (vision_tower.* and mm_projector.*, 168 tensors) is not described in any
// public source this project uses, and the engine never reads it (model.Ignored). The layout below is
// SYNTHETIC: a MoonViT-style tower (the vision encoder of Kimi-VL and Kimi K2.5: width 1152, MLP 4304,
// patch 14, 27 pre-norm blocks of six tensors) with a 2x2 patch-merging MLP projector into the text width,
// sized so that it closes the release's totals exactly: 168 tensors and 894,717,952 bytes, so the whole
// directory has 497,220 tensors and 1,560,860,324,864 bytes. The position table (109 x 109 x 1152) is the
// one free dimension that makes the bytes come out exact; nothing downstream may rely on any of these
// shapes.

// visionShape is the size of a synthetic image tower and projector.
type visionShape struct {
	Width, MLP, Blocks, Patch, PosGrid, MergedHidden int
}

// k3Vision closes the release totals: 168 tensors, 894,717,952 bytes (checked by a test).
var k3Vision = visionShape{Width: 1152, MLP: 4304, Blocks: 27, Patch: 14, PosGrid: 109, MergedHidden: 1856}

// smallVision keeps the same tensor names at a few kilobytes, so that every preset exercises the reader's
// skipping of the image path.
var smallVision = visionShape{Width: 32, MLP: 64, Blocks: 2, Patch: 2, PosGrid: 4, MergedHidden: 64}

// visionTensors lists the tower and projector tensors (all BF16), given the text hidden size the projector
// writes into: 6 per block, then patch embedding, position table and final norm, then the projector.
func visionTensors(v visionShape, hidden int) []checkpoint.Spec {
	bf := func(name string, shape ...int64) checkpoint.Spec {
		return checkpoint.Spec{Name: name, DType: checkpoint.BF16, Shape: shape}
	}
	d, m, merged := int64(v.Width), int64(v.MLP), int64(4*v.Width) // 2x2 patches merged before the projector
	out := []checkpoint.Spec{
		bf("vision_tower.patch_embed.proj.weight", d, 3, int64(v.Patch), int64(v.Patch)),
		bf("vision_tower.pos_emb.weight", int64(v.PosGrid), int64(v.PosGrid), d),
	}
	for b := range v.Blocks {
		p := fmt.Sprintf("vision_tower.encoder.blocks.%d.", b)
		out = append(out,
			bf(p+"norm0.weight", d),
			bf(p+"attn.wqkv.weight", 3*d, d),
			bf(p+"attn.wo.weight", d, d),
			bf(p+"norm1.weight", d),
			bf(p+"mlp.fc0.weight", m, d),
			bf(p+"mlp.fc1.weight", d, m),
		)
	}
	return append(out,
		bf("vision_tower.encoder.final_layernorm.weight", d),
		bf("mm_projector.pre_norm.weight", merged),
		bf("mm_projector.proj.0.weight", int64(v.MergedHidden), merged),
		bf("mm_projector.proj.2.weight", int64(hidden), int64(v.MergedHidden)),
	)
}
