package replay

// What a wave's plan counts, in bytes: a token's activations and state, the carries of the longest
// sequence across slices, and the weights at a wave's peak. plan.go sizes slices and waves from them
// against the budgets of plan_budget.go.

import (
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// tokenBytes are the bytes a token of a wave takes: on the device in a slice's activations (act), in
// the per-token state on the device (float32 tensors on every backend) and in host memory (bfloat16
// values, float32 in FP32 precision); the FFNs' intermediates counted a row (tokenBytesFFN).
func (e *Engine) tokenBytes() (act, state, hostState int64) { return e.tokenBytesFFN(false) }

// tokenBytesFFN is tokenBytes with the FFNs' intermediates left out of a row's activations when
// boundedFFN is set and the backend bounds them (ffnScratch: then counted once a slice instead).
func (e *Engine) tokenBytesFFN(boundedFFN bool) (act, state, hostState int64) {
	eb := e.Model.ActivationBytes()
	hostEB := int64(2)
	if e.Model.Ops.Precision() == ops.FP32 {
		hostEB = 4
	}
	v := e.Plan.StateValuesPerToken()
	if boundedFFN {
		_, boundedFFN = e.ffnScratch()
	}
	return e.Plan.SliceValuesPerTokenFFN(boundedFFN)*eb + e.expertScratch(), 4 * v, hostEB * v
}

// ffnScratch is what the backend's SiTUFFN calls hold beyond their input and output whatever a slice's
// rows (ops.SiTUFFNScratch), the most over the model's FFN widths (the dense FFN's, the shared experts'),
// and whether every width is bounded so; where one is not, the plan counts the FFNs' intermediates a row
// (model.Plan.SliceValuesPerTokenFFN) and this is 0.
func (e *Engine) ffnScratch() (bytes int64, bounded bool) {
	if _, ok := e.Model.Ops.(ops.SiTUFFN); !ok {
		return 0, false
	}
	s, ok := e.Model.Ops.(ops.SiTUFFNScratch)
	if !ok {
		return 0, false
	}
	d := e.Model.Dims
	var widths []int
	if e.Plan.Count(model.KDA, model.Dense)+e.Plan.Count(model.MLA, model.Dense) > 0 {
		widths = append(widths, d.DenseFFN)
	}
	if e.Plan.MoELayers() > 0 {
		widths = append(widths, d.SharedWidth)
	}
	for _, w := range widths {
		n, ok := s.SiTUFFNScratchBytes(d.Hidden, w)
		if !ok {
			return 0, false
		}
		bytes = max(bytes, n)
	}
	return bytes, true
}

// prefetchBytes is what a token's state takes on the device on its way in from host memory, beside the
// slice before it (model/state_prefetch.go): hostState, its bytes in host memory, on a backend that
// splits transfers (ops.PrefetchBF16Transfer) in BF16 precision; else 0.
func (e *Engine) prefetchBytes(hostState int64) int64 {
	if _, ok := e.Model.Ops.(ops.PrefetchBF16Transfer); ok && e.Model.Ops.Precision() == ops.BF16 {
		return hostState
	}
	return 0
}

// downloadBytes is what a token's queued downloads may hold on the device beside the next slice's work
// (ops.QueuedBF16Transfer: the bfloat16 bits on their way to host memory, given back by the next queued
// transfer; cuda/state_download.go), on a backend with queued transfers in BF16 precision, else 0: an
// expert-major layer's stash of expert inputs and shared outputs in host memory (latent + hidden values,
// stash), and where the state lives in host memory its running sum and the block a layer banks (2 x
// hidden values, state).
func (e *Engine) downloadBytes(p WavePlan) (stash, state int64) {
	if _, ok := e.Model.Ops.(ops.QueuedBF16Transfer); !ok || e.Model.Ops.Precision() != ops.BF16 {
		return 0, 0
	}
	d := e.Model.Dims
	if p.ExpertMajor && !p.StashOnDevice {
		stash = 2 * int64(d.Latent+d.Hidden)
	}
	return stash, 2 * 2 * int64(d.Hidden)
}

// carryBytes is what the token-mixing ops carry for the longest sequence, and, sliced, the transient
// expansion of its earlier keys in a slice's MLA.
func (e *Engine) carryBytes(longest int, sliced bool) int64 {
	n := e.Plan.CarryValues(longest) * 4
	if sliced {
		if fixed, _, ok := e.prefixBytes(longest); ok {
			return n + fixed
		}
		n += e.Plan.PrefixValues(longest) * 4
	}
	return n
}

// prefixBytes is what a backend that says so (ops.PrefixSizer) holds in a slice's MLA for a sequence of
// longest rows begun in earlier slices: bytes fixed for the call and bytes per row of the slice (ok false
// without MLA layers or without the interface).
func (e *Engine) prefixBytes(longest int) (fixed, perRow int64, ok bool) {
	ps, isPS := e.Model.Ops.(ops.PrefixSizer)
	if !isPS || len(e.Plan.LayerIndices(model.MLA)) == 0 {
		return 0, 0, false
	}
	d := e.Model.Dims
	fixed, perRow = ps.MLAPrefixBytes(longest, d.MLAHeads, d.QKNope, d.QKShared, d.VHead, d.KVLora)
	return fixed, perRow, true
}

// expertScratch is the routed experts' scratch a token takes in ExpertsAccumulate (0 without MoE layers):
// its row and the pairs it brings to one call at most (callPairs), not all top-k of them.
func (e *Engine) expertScratch() int64 {
	if e.Plan.MoELayers() == 0 {
		return 0
	}
	return e.Model.ExpertScratchBytes(1, e.callPairs())
}

// callPairs is the (row, expert) pairs a row brings to one expert call at most, as the plan counts the
// calls' scratch and the model cuts its calls (model.Pass.CallPairs; 0 without MoE layers).
func (e *Engine) callPairs() int {
	if e.Plan.MoELayers() == 0 {
		return 0
	}
	if e.wholeCalls {
		return e.Model.Dims.TopK
	}
	return e.Model.CallPairs()
}

// uploaded is what stays uploaded between waves: the globals and the resident layers.
func (e *Engine) uploaded() int64 {
	var n int64
	for _, s := range e.Plan.GlobalTensors() {
		n += s.Bytes()
	}
	return n + e.kept.bytes()
}

// weightPeak is the device memory the weights take at the peak of a wave, in checkpoint bytes: the
// globals, the resident layers, the largest layer's own tensors, and its routed experts held at once (all
// of them when sliced, since a layer's experts serve every slice; else a chunk).
func (e *Engine) weightPeak(sliced bool) int64 { return e.weightPeakChunk(sliced, e.opts.ExpertChunk) }

// tailBytes is the most checkpoint bytes a folded expert-major layer keeps on the device into the next
// layer (model.Plan.TailBytes): its routed_expert_norm and routed_expert_up_proj.
func (e *Engine) tailBytes() int64 {
	var most int64
	for i := range e.Plan.Layers {
		most = max(most, e.Plan.TailBytes(i))
	}
	return most
}

// weightPeakChunk is weightPeak with chunk experts held at once when not sliced (0: all).
func (e *Engine) weightPeakChunk(sliced bool, chunk int) int64 {
	m := e.Plan
	var own, experts int64
	for i, l := range m.Layers {
		o, x := m.LayerBytes(i)
		own = max(own, o)
		if l.FFN == model.MoE {
			per := x / int64(m.Config.NumExperts)
			held := int64(m.Config.NumExperts)
			if !sliced && chunk > 0 {
				held = int64(min(chunk, m.Config.NumExperts))
			}
			experts = max(experts, per*held)
		}
	}
	return e.uploaded() + own + experts
}
