package synth

import (
	"fmt"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
)

// Layout is everything about a synthetic checkpoint except the tensor values: the config, the layer plan,
// and which tensor lies where in which shard. It is computed without touching the disk, so tests can check
// the full K3 shape against the manifest in milliseconds.
type Layout struct {
	Preset Preset
	Seed   uint64
	Plan   *model.Plan
	Shards []Shard
}

// Shard is one safetensors file: its tensors in data order with offsets relative to the data section.
type Shard struct {
	File    string
	Tensors []Placed
	Header  []byte // the whole header: 8-byte length, JSON, space padding to an 8-byte boundary
	Size    int64  // file size: len(Header) + data bytes
}

// Placed is a tensor and where its data begins, counted from the start of the shard's data section.
type Placed struct {
	checkpoint.Spec
	Begin int64
}

// MaxTensors bounds the tensors of a synthetic directory: four times the release's 497,220. Its layout
// is held in memory (about 350 bytes a tensor), so a layer count that would pass it is refused, by count,
// before any tensor is listed.
const MaxTensors = 4 * 497_220

// NewLayout computes the layout of a preset for n layers (0: the preset's default).
func NewLayout(p Preset, n int, seed uint64) (*Layout, error) {
	plan, err := p.plan(n)
	if err != nil {
		return nil, err
	}
	return p.layout(plan, seed)
}

// plan is the preset's layer plan for n layers (0: the default), with A_log padded as the preset says.
// It is cheap (a few entries a layer): the tensor count is computed, not listed, and a count past
// MaxTensors is refused here.
func (p Preset) plan(n int) (*model.Plan, error) {
	tc, err := p.TextConfig(n)
	if err != nil {
		return nil, err
	}
	plan, err := model.NewPlan(tc)
	if err != nil {
		return nil, fmt.Errorf("synth: preset %s: %w", p.Name, err)
	}
	if p.aLogPad > 0 {
		heads := tc.LinearAttn.NumHeads
		plan.ALogLen = (heads + p.aLogPad - 1) / p.aLogPad * p.aLogPad
	}
	text, _ := plan.TensorCount()
	if total := text + int64(len(visionTensors(p.vision, tc.HiddenSize))); total > MaxTensors {
		return nil, fmt.Errorf("%w: %s with %d layers has %d tensors: more than the %d synth writes (synth.MaxTensors, four times K3's)",
			ErrPreset, p.Name, len(plan.Layers), total, MaxTensors)
	}
	return plan, nil
}

// layout places every tensor of plan in the preset's shards.
func (p Preset) layout(plan *model.Plan, seed uint64) (*Layout, error) {
	specs := writeOrder(plan, p.vision)
	var total int64
	for _, s := range specs {
		total += s.Bytes()
	}
	shards, err := splitShards(specs, total, p.shards(plan.Config, total))
	if err != nil {
		return nil, fmt.Errorf("synth: preset %s: %w", p.Name, err)
	}
	return &Layout{Preset: p, Seed: seed, Plan: plan, Shards: shards}, nil
}

// dataBytes is the tensor data of the preset's directory for plan, computed from the plan's layer sizes
// without listing the tensors: what a dense write needs at least, known before the layout is built.
func (p Preset) dataBytes(plan *model.Plan) int64 {
	var n int64
	for _, s := range append(plan.GlobalTensors(), visionTensors(p.vision, plan.Config.HiddenSize)...) {
		n += s.Bytes()
	}
	for i := range plan.Layers {
		own, experts := plan.LayerBytes(i)
		n += own + experts
	}
	return n
}

// writeOrder lists every tensor of the directory in the order the shards hold them: the embedding, each
// layer's own tensors then its experts (so a layer is contiguous and layers ascend across the shards, the
// order in which the engine streams them), the output norms and lm_head, and last the image path.
func writeOrder(plan *model.Plan, v visionShape) []checkpoint.Spec {
	globals := plan.GlobalTensors() // embed_tokens, norm, output_attn_res_norm, output_attn_res_proj, lm_head
	out := []checkpoint.Spec{globals[0]}
	for i, l := range plan.Layers {
		out = append(out, plan.LayerTensors(i)...)
		if l.FFN == model.MoE {
			for e := range plan.Config.NumExperts {
				out = append(out, plan.ExpertTensors(i, e)...)
			}
		}
	}
	out = append(out, globals[1:]...)
	return append(out, visionTensors(v, plan.Config.HiddenSize)...)
}

// ShardName is the file name of shard i (0-based) of n, spelled as in the release: a 5-digit 1-based index
// and a 6-digit total, model-00001-of-000096.safetensors.
func ShardName(i, n int) string { return fmt.Sprintf("model-%05d-of-%06d.safetensors", i+1, n) }

// splitShards cuts the ordered tensors into n shards of about equal bytes: a tensor goes to the shard its
// middle byte falls in, so shards are contiguous runs of the write order and none is split. Tensors lie
// back to back (the safetensors library refuses gaps); every size here is a multiple of 8, so all data
// offsets stay 8-byte aligned.
func splitShards(specs []checkpoint.Spec, total int64, n int) ([]Shard, error) {
	shards := make([]Shard, n)
	var before int64
	for _, s := range specs {
		size := s.Bytes()
		i := int((float64(before) + float64(size)/2) / float64(total) * float64(n))
		i = min(max(i, 0), n-1)
		sh := &shards[i]
		var begin int64
		if k := len(sh.Tensors); k > 0 {
			last := sh.Tensors[k-1]
			begin = last.Begin + last.Bytes()
		}
		if begin%8 != 0 {
			return nil, fmt.Errorf("tensor %s would start at data offset %d, not 8-byte aligned", s.Name, begin)
		}
		sh.Tensors = append(sh.Tensors, Placed{Spec: s, Begin: begin})
		before += size
	}
	for i := range shards {
		sh := &shards[i]
		sh.File = ShardName(i, n)
		if len(sh.Tensors) == 0 {
			return nil, fmt.Errorf("%d shards leave %s empty: use fewer", n, sh.File)
		}
		sh.Header = encodeHeader(sh.Tensors)
		last := sh.Tensors[len(sh.Tensors)-1]
		sh.Size = int64(len(sh.Header)) + last.Begin + last.Bytes()
	}
	return shards, nil
}

// Specs returns every tensor of the directory in write order (text and image path).
func (l *Layout) Specs() []checkpoint.Spec {
	var out []checkpoint.Spec
	for _, sh := range l.Shards {
		for _, t := range sh.Tensors {
			out = append(out, t.Spec)
		}
	}
	return out
}

// Totals returns the number of tensors and their data bytes (headers excluded), as the index's
// metadata.total_size counts them.
func (l *Layout) Totals() (tensors int, bytes int64) {
	for _, sh := range l.Shards {
		tensors += len(sh.Tensors)
		for _, t := range sh.Tensors {
			bytes += t.Bytes()
		}
	}
	return tensors, bytes
}

// FileBytes is the size of all shard files together, headers included: what a dense write needs on disk.
func (l *Layout) FileBytes() int64 {
	var n int64
	for _, sh := range l.Shards {
		n += sh.Size
	}
	return n
}
