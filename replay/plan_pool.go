package replay

// Pooled expert calls where a layer's routed experts fit the device beside a slice.
//
// Sliced, an MoE layer calls its routed experts once a slice, on that slice's rows: at 262,144 tokens in
// 3 slices about 1,600 rows an expert a call, and on the cuBLASLt path every call decodes each expert's
// MXFP4 weights to bfloat16 again. Pooled, the layer runs expert-major (model/moe_major.go) with its
// expert inputs kept on the device and its experts held and fetched ahead of the router, as a sliced
// layer's are: each chunk's call takes every slice's rows (H200, docs/records/run52-run54: 530-542 ms of
// routed experts a layer against 630-637 slice by slice). The price is the stash on the device ((latent +
// hidden) activations and a float32 latent accumulator a token), so the plan pools only where it reads the
// weights as often as the sliced plan, keeps the state where that plan keeps it (on the device, or in host
// memory) and keeps slices of at least sliceFloor tokens (or the slices asked for), and with the state in
// host memory at least 1/hostPoolFloor of the sliced plan's. In run 54 the whole wave ran as fast either
// way: the pooled layers' device still idles before each expert call (docs/benchmarks.md, run 14).
//
// Where the state lives in host memory, each MoE layer's last phase is folded into the next sweep
// (WavePlan.FoldMajor, model/moe_tail.go). Unfolded, pooling there was slower (run 145: an H100 at 262,144
// tokens with --slice-tokens 65536): the expert-major layer's last phase brought each slice's running sum
// to the device and back once more, and the stash on the device left smaller slices, 8 slices of 35,840
// pooled against 5 of 58,368 a call a slice: kda+moe 1.523-1.555 s against 1.437, mla+moe 1.400-1.407 s
// against 1.311. Folded, the running sums cross once a layer as a sliced layer's do and the smaller slices
// stay (the stash kept as bfloat16 would take half as much): run 148, an H200 under --device-memory 75GB, 7
// slices of 37,888 pooled against 5 of 63,488 a call a slice, kda+moe 1.304 s against 1.370, mla+moe 1.170
// against 1.237.

import (
	"fmt"

	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// planPooled is the pooled plan of lens, when it is to replace the sliced plan p (ok false: keep p).
func (e *Engine) planPooled(lens []int, p WavePlan) (WavePlan, bool) {
	if e.opts.NoExpertPooling || p.Slices < 2 || e.Plan.MoELayers() == 0 {
		return p, false
	}
	if _, ok := e.Model.Ops.(ops.RowJoiner); !ok {
		return p, false // the stash would go through host memory: two trips of every expert input a chunk
	}
	chunk := e.pooledChunk(p.WaveTokens)
	q, err := e.planWith(lens, modePooled, chunk)
	if err == nil && q.HostState { // the last phases folded, their weights counted (a little less room)
		q, err = e.planWith(lens, modePooledFold, chunk)
	}
	// never the state off the device where the sliced plan keeps it there
	if err != nil || q.Waves != p.Waves || (q.HostState && !p.HostState) {
		return p, false
	}
	if q.Slices > 1 && q.SliceTokens < min(sliceFloor, q.WaveTokens) && e.opts.SliceTokens == 0 {
		return p, false
	}
	if q.HostState && q.SliceTokens < p.SliceTokens/hostPoolFloor {
		return p, false
	}
	note := fmt.Sprintf("MoE layers pooled: chunks of %d experts, each call over every slice's rows (pools of up to %s), "+
		"the layer's experts held and fetched ahead of its router, expert inputs kept on the device", chunk, numtext.Bytes(q.ExpertPool))
	if q.FoldMajor {
		note += "; each one's last phase runs in the next sweep, so that the running sums cross once a layer"
	}
	note += " (--no-expert-pooling: a call a slice)"
	if q.Note != "" { // what planWith said of the slices (--slice-tokens capped) stays
		note = q.Note + "; " + note
	}
	q.Note = note
	return q, true
}

// hostPoolFloor bounds how much smaller than the sliced plan's a pooled plan's slices may be where the
// state lives in host memory: the pooled plan keeps the wave's expert inputs on the device, so its slices
// are smaller, and each slice costs its own crossings of the state and fills the device less in the
// token-mixing kernels (one block a sequence and head).
const hostPoolFloor = 2

// pooledCallPairs bounds the (row, expert) pairs of one pooled expert call when no chunk is given. The
// host plans each call (its rows per expert, the combine's tables) while the device runs the call before:
// before calls of about 600,000 pairs (262,144 tokens, chunks of 128 experts) the device idled about 11
// ms each (run 53), before one call of 4.2 million pairs (every expert at once) about 600 ms (run 50).
// With the host's planning since taken off the device's path (runs 52-54, the queued router), larger
// calls are still slower (run 128, kda+moe layer at 262,144 tokens: 7 calls 1.166-1.172 s, 4 calls
// 1.172, 2 calls 1.191, 1 call 1.218): fewer passes of the combine do not pay for a larger call's
// gathered rows and temporaries.
const pooledCallPairs = 1 << 19

// pooledChunk is how many experts a pooled layer's call takes: EngineOptions.ExpertChunk when given, else
// the largest of n, n/2, n/4 ... whose share of a wave of tokens (tokens x top-k x chunk / n pairs,
// routing being even) stays within pooledCallPairs and the rows the backend indexes at once
// (ops.ElementLimit: a chunk's pairs past it would leave each slice a call alone).
func (e *Engine) pooledChunk(tokens int) int {
	if e.opts.ExpertChunk > 0 {
		return e.opts.ExpertChunk
	}
	d := e.Model.Dims
	most := int64(pooledCallPairs)
	if l, ok := e.Model.Ops.(ops.ElementLimit); ok {
		most = min(most, l.MaxElements()/int64(max(d.Latent, d.ExpertFFN)))
	}
	n := e.Plan.Config.NumExperts
	pairs := int64(tokens) * int64(d.TopK)
	c := n
	for c > 1 && pairs*int64(c) > most*int64(n) {
		c /= 2
	}
	return c
}
