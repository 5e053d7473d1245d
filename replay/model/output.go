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
	out, err := f.mixNorm(st.Blocks, st.P, g.OutputMix, SiteOutput, g.Norm, "norm")
	if err != nil {
		return nil, fmt.Errorf("readout: %w", err)
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

// LoadExperts reads routed experts ids of layer `layer` (srcs[i] holds expert ids[i]'s tensors) and
// uploads them in one call when the backend is an ops.ExpertBatchUploader, else one by one; on an error
// none stays uploaded. The result is in the order of ids.
func (m *Model) LoadExperts(ctx context.Context, layer int, ids []int, srcs []Source) ([]ops.Expert, error) {
	up, ok := m.Ops.(ops.ExpertBatchUploader)
	if !ok || len(ids) < 2 {
		out := make([]ops.Expert, 0, len(ids))
		for i, e := range ids {
			x, err := m.LoadExpert(ctx, layer, e, srcs[i])
			if err != nil {
				for _, done := range out {
					m.Ops.Free(done)
				}
				return nil, err
			}
			out = append(out, x)
		}
		return out, nil
	}
	parts := make([]ops.ExpertParts, len(ids))
	for i, e := range ids {
		var err error
		if parts[i], err = m.expertParts(ctx, layer, e, srcs[i]); err != nil {
			return nil, err
		}
	}
	xs, err := up.UploadExperts(m.Dims.Latent, m.Dims.ExpertFFN, parts)
	if err != nil {
		return nil, fmt.Errorf("layer %d experts %d-%d: %w", layer, ids[0], ids[len(ids)-1], err)
	}
	return xs, nil
}

// expertParts reads routed expert e of layer `layer` from src.
func (m *Model) expertParts(ctx context.Context, layer, e int, src Source) (ops.ExpertParts, error) {
	specs := m.Plan.ExpertTensors(layer, e) // w1 packed, scale; w3 packed, scale; w2 packed, scale
	ld := &loader{ctx: ctx, b: m.Ops, src: src}
	raw := make([][]byte, len(specs))
	for i, s := range specs {
		raw[i] = ld.bytes(s)
	}
	if ld.err != nil {
		return ops.ExpertParts{}, fmt.Errorf("layer %d expert %d: %w", layer, e, ld.err)
	}
	return ops.ExpertParts{ID: e, W1Packed: raw[0], W1Scale: raw[1], W3Packed: raw[2], W3Scale: raw[3], W2Packed: raw[4], W2Scale: raw[5]}, nil
}

// LoadExpert reads routed expert e of layer `layer` and uploads it.
func (m *Model) LoadExpert(ctx context.Context, layer, e int, src Source) (ops.Expert, error) {
	p, err := m.expertParts(ctx, layer, e, src)
	if err != nil {
		return nil, err
	}
	x, err := m.Ops.UploadExpert(e, m.Dims.Latent, m.Dims.ExpertFFN, p.W1Packed, p.W1Scale, p.W3Packed, p.W3Scale, p.W2Packed, p.W2Scale)
	if err != nil {
		return nil, fmt.Errorf("layer %d expert %d (%s): %w", layer, e, ExpertPrefix(layer, e), err)
	}
	return x, nil
}
