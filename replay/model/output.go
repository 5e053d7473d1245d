package model

import (
	"context"
	"fmt"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// Readout is what the model reads out of a state: h = AR(B + [p]; output mix), then RMSNorm with norm.weight,
// ready for lm_head (K3_SPEC.md 5.1, after layer 92). Applied after an earlier layer it is the logit lens,
// computed by the same code, so the lens at the last layer is the model's own output bit for bit.
func (f *Pass) Readout(g *Globals, st *State) (ops.Tensor, error) {
	// state: blocks and p [tokens, hidden] bf16 -> [tokens, hidden] bf16
	if st.P == nil {
		return nil, fmt.Errorf("readout: the running sum is empty (mid-layer state)")
	}
	h, err := f.mix(st.Blocks, st.P, g.OutputMix, SiteOutput)
	if err != nil {
		return nil, fmt.Errorf("readout: %w", err)
	}
	out, err := f.Model.Ops.RMSNorm(h, g.Norm, f.Model.eps)
	f.Model.Ops.Free(h)
	if err != nil {
		return nil, fmt.Errorf("readout: norm: %w", err)
	}
	return out, nil
}

// Stats reduces lm_head's logits of a readout to next-token statistics: targets[r] is the id that follows
// row r (-1 at the last position of a sequence), k the number of alternatives kept.
func (f *Pass) Stats(g *Globals, readout ops.Tensor, targets []int32, k int) ([]ops.TokenStats, error) {
	if len(targets) != readout.Rows() {
		return nil, fmt.Errorf("stats: %d targets for %d rows", len(targets), readout.Rows())
	}
	if k < 0 || k > f.Model.Dims.Vocab {
		return nil, fmt.Errorf("stats: top-k %d outside 0..%d (the vocabulary)", k, f.Model.Dims.Vocab)
	}
	st, err := f.Model.Ops.TokenStats(readout, g.LMHead, targets, k)
	if err != nil {
		return nil, fmt.Errorf("stats: lm_head: %w", err)
	}
	return st, nil
}

// LoadExpert reads routed expert e of layer `layer` and uploads it.
func (m *Model) LoadExpert(ctx context.Context, layer, e int, src Source) (ops.Expert, error) {
	specs := m.Plan.ExpertTensors(layer, e) // w1 packed, scale; w3 packed, scale; w2 packed, scale
	ld := &loader{ctx: ctx, b: m.Ops, src: src}
	raw := make([][]byte, len(specs))
	for i, s := range specs {
		raw[i] = ld.bytes(s)
	}
	if ld.err != nil {
		return nil, fmt.Errorf("layer %d expert %d: %w", layer, e, ld.err)
	}
	x, err := m.Ops.UploadExpert(e, m.Dims.Latent, m.Dims.ExpertFFN, raw[0], raw[1], raw[2], raw[3], raw[4], raw[5])
	if err != nil {
		return nil, fmt.Errorf("layer %d expert %d (%s): %w", layer, e, ExpertPrefix(layer, e), err)
	}
	return x, nil
}
