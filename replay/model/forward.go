package model

import (
	"context"
	"fmt"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// Model is a plan bound to a backend, with the constants the forward pass uses.
type Model struct {
	Plan *Plan
	Dims Dims
	Ops  ops.Backend
	eps  float32 // rms_norm_eps: the layer norms, o_norm, the routed expert norm and the final norm
}

// New binds a plan to a backend.
func New(p *Plan, b ops.Backend) *Model {
	return &Model{Plan: p, Dims: p.Dims(), Ops: b, eps: float32(p.Config.RMSNormEps)}
}

// ActivationBytes is the device memory one activation value takes on m's backend (ops.ActivationSizer,
// else 4: a float32).
func (m *Model) ActivationBytes() int64 {
	if s, ok := m.Ops.(ops.ActivationSizer); ok {
		return int64(s.ActivationElementBytes())
	}
	return 4
}

// Site names where an AttnRes mix is taken.
type Site string

// The three mix sites: before attention, before the FFN, and the output mix (also used by the lens).
const (
	SiteAttn   Site = "attn"
	SiteMLP    Site = "mlp"
	SiteOutput Site = "output"
)

// Observer receives what a pass can report beyond its outputs. Calls happen on the pass's goroutine.
type Observer interface {
	// Routing is called once per MoE layer with the router's choice for every row of the wave.
	Routing(layer int, r ops.Routing)
	// Mix is called for every AttnRes mix with its weights: rows x n, n = blocks so far + 1 (the last
	// weight is the running sum's).
	Mix(layer int, site Site, weights []float32, n int)
}

// Wanter is an Observer that says which reports it keeps. Sliced, a pass gathers every slice's routing
// and mixing weights to report them once for the wave; for an observer that keeps neither it reports
// them empty instead (rows 0), with no gathering: a wave of 262,144 tokens routes 4.2 million pairs, and
// gathering them took about 13 ms of host time a slice while the device waited (docs/records/run52). On
// a backend that mixes without the weights (ops.QuietMixer) mixing weights nobody keeps are not even
// copied to the host: they are reported empty, sliced or not.
type Wanter interface {
	// Wants reports whether the observer keeps the routing and the mixing weights.
	Wants() (routing, mixes bool)
}

// Pass is one wave's trip through the layers: its layout, where experts come from, what observes it.
type Pass struct {
	Ctx     context.Context
	Model   *Model
	Layout  ops.Layout
	Experts ExpertSource
	Obs     Observer // may be nil
	// ExpertChunk is how many routed experts are uploaded at once in an MoE layer (0: all chosen at once).
	// Results do not depend on it.
	ExpertChunk int
	// PrefetchExperts is how many routed experts of an MoE layer may be fetched before its router runs,
	// when the wave is large enough that nearly every expert will be chosen and the source is an
	// ExpertPrefetcher (0: none; negative: all of them). Results do not depend on it.
	PrefetchExperts int
	// SliceTokens is the most rows of the wave a layer computes at once (0: the whole wave). A layer's
	// weights, its routed experts included, are uploaded once and serve every slice; the token-mixing ops
	// carry the state of a sequence that crosses a slice boundary (ops.Slicer). Results do not depend on
	// it. A backend without ops.Slicer runs every layer over the whole wave.
	SliceTokens int
	// HostState keeps the per-token state of slices DeviceSlices.. in host memory between their uses (for
	// waves whose state does not fit on the device beside a slice's activations); the first DeviceSlices
	// keep theirs on the device. Results do not depend on either.
	HostState    bool
	DeviceSlices int
	// ExpertMajor runs a sliced wave's MoE layers expert chunk by expert chunk (moe_major.go): each chunk
	// of ExpertChunk routed experts is uploaded once and serves every slice before it is freed, for a
	// device that cannot hold a layer's experts beside a slice. Results do not depend on it.
	ExpertMajor bool
	// StashOnDevice keeps an expert-major layer's expert inputs and shared outputs on the device slice by
	// slice, a pool's joined for its calls (ops.RowJoiner), instead of in host memory. Results do not
	// depend on it.
	StashOnDevice bool
	// PrefetchMajor fetches an expert-major layer's experts ahead of its router, as a sliced layer's
	// (PrefetchExperts), for a device that holds them all beside a slice: the layer runs expert-major
	// for its calls over every slice's rows, not for want of memory. Results do not depend on it.
	PrefetchMajor bool
	// FoldMajor runs an expert-major layer's last phase (its expert sums back to the hidden width, added
	// to the running sum) in the next sweep over the wave, slice by slice before that sweep's own work,
	// where its stash is on the device (moe_tail.go): with the state in host memory, the running sums
	// then cross once a layer instead of twice. The layer's routed_expert_norm and up projection stay on the device until then
	// (Pending, ReleaseLayer). Results do not depend on it.
	FoldMajor bool
	// Host gives the host memory of the state of slices kept in host memory and of expert-major stashes
	// (nil: the Go heap); Close gives it back.
	Host HostBuffers
	// PoolBytes is the device memory an expert-major layer's expert call may take beyond its accumulator
	// (its rows of z and the backend's scratch: moe_pool.go): consecutive slices whose call fits share it.
	// 0: a call a slice. Results do not depend on it.
	PoolBytes int64
	// CallPairs is the most (row, expert) pairs a row brings to one ExpertsAccumulate call, as the plan
	// counted the calls' scratch (Model.CallPairs): a chunk whose experts bring more is accumulated in
	// several calls on ascending runs of them (moe_calls.go). 0: one call a chunk. Results do not depend
	// on it.
	CallPairs  int
	layer      int
	lastChosen int // distinct experts the last MoE layer of this pass chose
	slices     []ops.SliceLayout
	cur        ops.SliceLayout // the slice a layer is running
	curIndex   int
	carries    carries            // the token-mixing ops' carries of the layer running
	held       map[int]ops.Expert // routed experts uploaded for the layer running, shared by its slices
	tail       *majorTail         // an expert-major layer's last phase, waiting for the next sweep (FoldMajor)
	seen       seenObs            // what the slices of the layer running report, for the observer
	host       hostBufs           // the host memory of the state and stashes (hostbufs.go)
}

// State is the per-token state a wave carries between layers (K3_SPEC.md 5.1): the completed AttnRes block
// vectors and the running partial sum, each [tokens, hidden] (bf16 values in bf16 mode).
type State struct {
	Blocks []ops.Tensor
	P      ops.Tensor // nil right after a layer banked it, until its attention output arrives
}

// Sliced says whether the pass runs its layers in more than one slice.
func (f *Pass) Sliced() bool { return len(f.slices) > 1 }

// Embed starts a wave's state: p = the embedding of each token, slice by slice. It fixes the pass's
// slices: SliceTokens rows each when the backend is an ops.Slicer, else one.
func (f *Pass) Embed(g *Globals, ids []int32) (*Wave, error) {
	if len(ids) != f.Layout.Tokens() {
		return nil, fmt.Errorf("embed: %d ids for a layout of %d tokens", len(ids), f.Layout.Tokens())
	}
	for i, id := range ids {
		if id < 0 || int(id) >= f.Model.Dims.Vocab {
			return nil, fmt.Errorf("embed: token %d: id %d outside the vocabulary 0..%d", i, id, f.Model.Dims.Vocab-1)
		}
	}
	n := f.SliceTokens
	if _, ok := f.Model.Ops.(ops.Slicer); !ok {
		n = 0
	}
	f.slices = ops.CutSlices(f.Layout, n)
	f.host.src = f.Host
	w := &Wave{Bounds: ops.SliceBounds(f.slices), dev: make([]*State, len(f.slices)), bufs: &f.host}
	if f.HostState {
		w.host, w.pre = make([]*hostState, len(f.slices)), make([]*pendingState, len(f.slices))
		for j := f.DeviceSlices; j < len(w.host); j++ {
			w.host[j] = &hostState{}
		}
	}
	for j := range f.slices {
		p, err := f.Model.Ops.Gather(g.Embed, ids[w.Bounds[j]:w.Bounds[j+1]])
		if err != nil {
			w.Free(f.Model.Ops)
			return nil, fmt.Errorf("embed: %w", err)
		}
		w.dev[j] = &State{P: p}
		if err := w.put(f.Model.Ops, j, true); err != nil {
			w.Free(f.Model.Ops)
			return nil, fmt.Errorf("embed: %w", err)
		}
	}
	return w, nil
}

// Free releases the state's tensors.
func (s *State) Free(b ops.Backend) {
	for _, t := range s.Blocks {
		b.Free(t)
	}
	b.Free(s.P)
	s.Blocks, s.P = nil, nil
}

// mix is AttnRes over the blocks plus v, reported to the observer. Where nothing will read the mixing
// weights and the backend is an ops.QuietMixer, it mixes without them (their copy to the host waits for
// the device) and reports them empty.
func (f *Pass) mix(blocks []ops.Tensor, v ops.Tensor, wg ops.Tensor, site Site) (ops.Tensor, error) {
	vs := mixed(blocks, v)
	if q, ok := f.Model.Ops.(ops.QuietMixer); ok && !f.keepsMixes() {
		out, err := q.AttnResMixQuiet(vs, wg)
		if err != nil {
			return nil, fmt.Errorf("AttnRes %s mix: %w", site, err)
		}
		f.seen.mix(f, site, nil, len(vs))
		return out, nil
	}
	out, weights, err := f.Model.Ops.AttnResMix(vs, wg)
	if err != nil {
		return nil, fmt.Errorf("AttnRes %s mix: %w", site, err)
	}
	f.seen.mix(f, site, weights, len(vs))
	return out, nil
}

// mixed is what a mix takes: the banked blocks, then v (a new slice: blocks is the state's).
func mixed(blocks []ops.Tensor, v ops.Tensor) []ops.Tensor {
	return append(append(make([]ops.Tensor, 0, len(blocks)+1), blocks...), v)
}

// mixNorm is RMSNorm(mix(blocks, v, wg, site), norm): one op where the backend fuses them
// (ops.MixNormer), else the two. what names the norm in errors.
func (f *Pass) mixNorm(blocks []ops.Tensor, v, wg ops.Tensor, site Site, norm ops.Tensor, what string) (ops.Tensor, error) {
	b := f.Model.Ops
	if mn, ok := b.(ops.MixNormer); ok {
		vs := mixed(blocks, v)
		keep := f.keepsMixes()
		out, weights, err := mn.AttnResMixNorm(vs, wg, norm, f.Model.eps, keep)
		if err != nil {
			return nil, fmt.Errorf("AttnRes %s mix and %s: %w", site, what, err)
		}
		f.seen.mix(f, site, weights, len(vs))
		return out, nil
	}
	h, err := f.mix(blocks, v, wg, site)
	if err != nil {
		return nil, err
	}
	out, err := b.RMSNorm(h, norm, f.Model.eps)
	b.Free(h)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// Layer runs layer w.Layer.Index for the whole wave (K3_SPEC.md 5.1 steps 1-4), slice after slice,
// updating the wave's state.
func (f *Pass) Layer(wv *Wave, w *LayerWeights) error {
	if err := f.Ctx.Err(); err != nil {
		return err
	}
	f.layer = w.Layer.Index
	defer f.endLayer(w.Layer.Index)
	var err error
	if f.expertMajor(w) {
		err = f.layerExpertMajor(wv, w)
	} else {
		err = f.eachLoaded(wv, sweep{changes: true, blocks: true, ahead: true}, func(j int, st *State) error {
			return f.layerSteps(st, w)
		})
	}
	if err == nil {
		err = f.carries.check()
	}
	if err != nil {
		return fmt.Errorf("layer %d (%s+%s): %w", w.Layer.Index, w.Layer.Attn, w.Layer.FFN, err)
	}
	f.seen.flush(f)
	return nil
}

// endLayer releases what the layer's slices shared: carries left by a failed slice, the routed experts
// held for every slice, those fetched ahead and never used.
func (f *Pass) endLayer(layer int) {
	f.carries.free(f.Model.Ops)
	if f.held != nil {
		f.lastChosen = len(f.held)
	}
	for _, e := range f.held {
		f.Model.Ops.Free(e)
	}
	f.held = nil
	f.seen = seenObs{}
	f.unused(layer)
}

func (f *Pass) layerSteps(st *State, w *LayerWeights) error {
	x, err := f.attnSteps(st, w)
	if err != nil {
		return err
	}
	if err := f.Ctx.Err(); err != nil { // each half of a layer can take many seconds on the CPU
		f.Model.Ops.Free(x)
		return err
	}
	a, b, err := w.FFN.Outputs(f, x)
	f.Model.Ops.Free(x)
	if err != nil {
		return fmt.Errorf("%s: %w", w.Layer.FFN, err)
	}
	if b == nil {
		return f.accumulate(st, a)
	}
	return f.accumulateSum(st, a, b)
}

// attnSteps runs a layer's attention sublayer on a slice's state and returns the FFN's input, the
// normed AttnRes mix before it (K3_SPEC.md 5.1 steps 1-3).
func (f *Pass) attnSteps(st *State, w *LayerWeights) (ops.Tensor, error) {
	b, m := f.Model.Ops, f.Model
	// hidden, p, blocks: [tokens, hidden] bf16
	pIn := st.P
	var x ops.Tensor
	var err error
	if len(st.Blocks) > 0 {
		x, err = f.mixNorm(st.Blocks, pIn, w.AttnMix, SiteAttn, w.AttnNorm, "input_layernorm")
	} else if x, err = b.RMSNorm(pIn, w.AttnNorm, m.eps); err != nil { // only layer 0 has no block: it reads the embedding as is
		err = fmt.Errorf("input_layernorm: %w", err)
	}
	if err != nil {
		return nil, err
	}
	if w.Layer.BlockStart { // bank p: layer 0 banks the embedding, layer 12k banks block k-1
		st.Blocks = append(st.Blocks, pIn)
		st.P = nil
	}
	a, err := w.Attn.Forward(f, x)
	b.Free(x)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", w.Layer.Attn, err)
	}
	// Experts fetched ahead of the router go now: the attention's work is queued, so on a device backend
	// their copies run beside it (the AttnRes mix below is the first wait for the device). Once a layer:
	// its experts serve every slice.
	if f.curIndex == 0 && (!f.expertMajor(w) || f.PrefetchMajor) {
		if err := f.prefetch(w); err != nil {
			b.Free(a)
			return nil, err
		}
	}
	if err := f.accumulate(st, a); err != nil {
		return nil, err
	}
	return f.mixNorm(st.Blocks, st.P, w.MLPMix, SiteMLP, w.FFNNorm, "post_attention_layernorm")
}

// accumulateSum adds an MoE layer's two outputs to the running sum: p = rounded(p + rounded(a + b)), in
// one op where the backend has ops.SumAdder (the sum a + b is then never written out), else as two Adds.
// It frees a and b.
func (f *Pass) accumulateSum(st *State, a, b ops.Tensor) error {
	be := f.Model.Ops
	if sa, ok := be.(ops.SumAdder); ok && st.P != nil {
		sum, err := sa.AddSum(st.P, a, b)
		be.Free(a)
		be.Free(b)
		if err != nil {
			return fmt.Errorf("running sum + routed + shared: %w", err)
		}
		be.Free(st.P) // never a banked block, as in accumulate
		st.P = sum
		return nil
	}
	y, err := be.Add(a, b)
	be.Free(a)
	be.Free(b)
	if err != nil {
		return fmt.Errorf("routed + shared: %w", err)
	}
	return f.accumulate(st, y)
}

// accumulate adds a sublayer output to the running sum: p = a when p is empty, else rounded(p + a).
func (f *Pass) accumulate(st *State, a ops.Tensor) error {
	if st.P == nil {
		st.P = a
		return nil
	}
	sum, err := f.Model.Ops.Add(st.P, a)
	f.Model.Ops.Free(a)
	if err != nil {
		return fmt.Errorf("running sum: %w", err)
	}
	// The old sum is never a banked block: banking empties p, so this p was made after it.
	f.Model.Ops.Free(st.P)
	st.P = sum
	return nil
}
