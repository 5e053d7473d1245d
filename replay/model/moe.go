package model

import (
	"fmt"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// MoEWeights are a Stable LatentMoE layer's weights other than its routed experts (K3_SPEC.md 5.5).
// In K3: 896 experts, 16 active, latent 3584, expert width 3072, two shared experts fused to 6144.
type MoEWeights struct {
	Router     ops.Tensor    // gate.weight: [experts, hidden] bf16, upcast for the fp32 router
	Bias       ops.Tensor    // gate.e_score_correction_bias: [1, experts] f32; it selects, never weights
	DownLatent ops.Tensor    // routed_expert_down_proj: [latent, hidden] bf16
	Norm       ops.Tensor    // routed_expert_norm: [1, latent] bf16
	UpLatent   ops.Tensor    // routed_expert_up_proj: [hidden, latent] bf16
	Shared     *DenseWeights // shared_experts.{gate,up,down}_proj, reading the full-width x
	layer      int
}

func bindMoE(get func(string) ops.Tensor, layer int) *MoEWeights {
	m := "block_sparse_moe."
	return &MoEWeights{
		Router: get(m + "gate.weight"), Bias: get(m + "gate.e_score_correction_bias"),
		DownLatent: get(m + "routed_expert_down_proj.weight"), Norm: get(m + "routed_expert_norm.weight"),
		UpLatent: get(m + "routed_expert_up_proj.weight"),
		Shared: &DenseWeights{
			Gate: get(m + "shared_experts.gate_proj.weight"), Up: get(m + "shared_experts.up_proj.weight"),
			Down: get(m + "shared_experts.down_proj.weight"),
		},
		layer: layer,
	}
}

// Chosen returns the distinct experts a routing uses, ascending. Ids index a table, not a map: a slice
// of a large wave routes over a million pairs, counted while the device waits (docs/records/run51).
func Chosen(r ops.Routing) []int { return chosenOf(pairCounts(r)) }

// chosenOf is the experts with pairs, ascending, of pairCounts' counts.
func chosenOf(pairs []int) []int {
	n := 0
	for _, c := range pairs {
		if c > 0 {
			n++
		}
	}
	out := make([]int, 0, n)
	for id, c := range pairs {
		if c > 0 {
			out = append(out, id)
		}
	}
	return out
}

// Outputs routes, runs the chosen experts in the latent width (fetched only now), normalises their sum
// and projects it back (a), beside the shared experts' output (b): the layer's output is rounded(a + b),
// which Pass.accumulateSum adds to the running sum.
func (w *MoEWeights) Outputs(f *Pass, x ops.Tensor) (up, shared ops.Tensor, err error) {
	// x: [tokens, hidden] bf16 -> up, shared: [tokens, hidden] bf16
	m := f.Model
	beta, linBeta := m.situBetas()
	in, err := w.before(f, x)
	if err != nil {
		return nil, nil, err
	}
	defer in.free(m.Ops)
	acc, err := m.Ops.Zeros(x.Rows(), m.Dims.Latent)
	if err != nil {
		return nil, nil, fmt.Errorf("expert accumulator: %w", err)
	}
	defer m.Ops.Free(acc)
	if err := w.experts(f, acc, in.z, in.routing, beta, linBeta); err != nil {
		return nil, nil, err
	}
	if up, err = w.after(f, acc); err != nil {
		return nil, nil, err
	}
	shared, in.shared = in.shared, nil // the caller's now
	return up, shared, nil
}

// moeInput is what an MoE layer computes from its input before the routed experts: the router's choice,
// the shared experts' output and the routed experts' input z.
type moeInput struct {
	routing   ops.Routing
	shared, z ops.Tensor // [tokens, hidden] and [tokens, latent] bf16
}

func (in *moeInput) free(b ops.Backend) {
	for _, t := range []ops.Tensor{in.shared, in.z} {
		if t != nil {
			b.Free(t)
		}
	}
	in.shared, in.z = nil, nil
}

// before routes x and runs the shared experts and the routed experts' down projection to the latent.
// The router is queued first and waited for last (ops.QueueRoute): the shared experts and the
// projection do not depend on it, and on a device backend they run while the host collects the routing,
// where the device would otherwise idle until the host had turned round (cuda/route_queued.go). The
// routed experts' weights are then still being fetched meanwhile too.
func (w *MoEWeights) before(f *Pass, x ops.Tensor) (in moeInput, err error) {
	m, b := f.Model, f.Model.Ops
	pending, err := ops.QueueRoute(b, x, w.Router, w.Bias, m.Dims.TopK, float32(m.Plan.Config.RoutedScalingFactor))
	if err != nil {
		return moeInput{}, fmt.Errorf("router: %w", err)
	}
	defer func() {
		routing, werr := pending.Wait() // on every return: the routing's device work ends before the caller frees x
		if err == nil && werr != nil {
			in.free(b)
			in, err = moeInput{}, fmt.Errorf("router: %w", werr)
		}
		if err == nil {
			in.routing = routing
			f.seen.route(f, routing)
		}
	}()
	shared, err := w.Shared.Forward(f, x)
	if err != nil {
		return moeInput{}, fmt.Errorf("shared experts: %w", err)
	}
	z, err := b.MatMul(x, w.DownLatent) // [tokens, latent] bf16
	if err != nil {
		b.Free(shared)
		return moeInput{}, fmt.Errorf("routed_expert_down_proj: %w", err)
	}
	return moeInput{shared: shared, z: z}, nil
}

// after ends the routed experts from their float32 sum acc: rounded, normed (RMSNorm rounds its input as
// it reads it) and projected back to the hidden width; the layer's output adds the shared experts' output
// to it (Pass.accumulateSum).
func (w *MoEWeights) after(f *Pass, acc ops.Tensor) (ops.Tensor, error) {
	m, b := f.Model, f.Model.Ops
	r := newRun(b)
	defer r.free()
	normed := r.do("routed_expert_norm", func() (ops.Tensor, error) { return b.RMSNorm(acc, w.Norm, m.eps) })
	up := r.result("routed_expert_up_proj", func() (ops.Tensor, error) { return b.MatMul(normed, w.UpLatent) })
	return up, r.err
}

// experts fetches the chosen experts in ascending chunks and accumulates their weighted outputs. The chunk
// size changes only how many experts are fetched at once, never the result: each row sums its experts in
// ascending id order either way. Unsliced, a chunk is freed before the next is fetched; sliced, every
// expert fetched stays for the layer's later slices, so that none is fetched twice in a layer, and each
// slice accumulates chunk by chunk, fetching what a chunk lacks just before it. A chunk's experts go in
// as many calls as keep each within the plan's pairs a row (moe_calls.go).
func (w *MoEWeights) experts(f *Pass, acc, z ops.Tensor, routing ops.Routing, beta, linBeta float32) error {
	pairs := pairCounts(routing)
	ids := chosenOf(pairs)
	chunk := f.ExpertChunk
	if f.callCount(ids, pairs, chunk, z.Rows()) > 1 { // several calls plan from one routing (ops.Routing.Indexed)
		routing = routing.Indexed()
		go routing.BuildIndex() // while the first chunk's experts are fetched (its call waits for it)
	}
	if !f.Sliced() {
		f.lastChosen = len(ids)
		if chunk <= 0 {
			chunk = len(ids)
		}
		for start := 0; start < len(ids); start += chunk {
			part := ids[start:min(start+chunk, len(ids))]
			experts, err := f.Experts.Experts(f.Ctx, w.layer, part)
			if err != nil {
				return fmt.Errorf("experts %v: %w", part, err)
			}
			err = f.expertCalls(acc, z, routing, part, experts, pairs, beta, linBeta)
			for _, e := range experts {
				f.Model.Ops.Free(e)
			}
			if err != nil {
				return fmt.Errorf("experts %v: %w", part, err)
			}
		}
		return nil
	}
	if f.held == nil {
		f.held = make(map[int]ops.Expert)
	}
	if chunk <= 0 {
		chunk = max(len(ids), 1)
	}
	// Chunk by chunk in ascending ids, as unsliced: the experts a chunk lacks are fetched, then the chunk
	// is accumulated, so that on a device backend the next chunk's copies overlap this one's compute (the
	// first slice fetches nearly all of a large wave's experts).
	for start := 0; start < len(ids); start += chunk {
		part := ids[start:min(start+chunk, len(ids))]
		var missing []int
		for _, id := range part {
			if f.held[id] == nil {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			experts, err := f.Experts.Experts(f.Ctx, w.layer, missing)
			if err != nil {
				return fmt.Errorf("experts %v: %w", missing, err)
			}
			for i, e := range experts {
				f.held[missing[i]] = e
			}
		}
		use := make([]ops.Expert, len(part))
		for i, id := range part {
			use[i] = f.held[id]
		}
		if err := f.expertCalls(acc, z, routing, part, use, pairs, beta, linBeta); err != nil {
			return fmt.Errorf("experts %v: %w", part, err)
		}
	}
	return nil
}
