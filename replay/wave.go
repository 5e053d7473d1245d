package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// WaveStats account for one wave's pass over the weights.
type WaveStats struct {
	Sequences, Tokens int
	LayerBytes        []int64 // per layer: non-expert weight bytes sent to the backend
	ExpertBytes       []int64 // per layer: routed expert bytes sent to the backend
	ExpertsRead       []int   // per layer: routed experts sent (only those some token chose)
	// CachedBytes per layer: of LayerBytes + ExpertBytes, the bytes that came from the host cache
	// (EngineOptions.HostCacheBytes) rather than from the checkpoint.
	CachedBytes []int64
	// ReadAheadUnused is the bytes of routed experts read from the checkpoint ahead of their routers
	// (EngineOptions.ExpertReadAhead) that no token chose: read, never sent to the backend, not in
	// ExpertBytes.
	ReadAheadUnused int64
	// ReadAheadBytes is, of ExpertBytes, the bytes read from the checkpoint ahead of their routers.
	ReadAheadBytes int64
	// HostAllocBytes is the host memory the engine allocated for its buffers during the wave (page-locked
	// on the CUDA backend, where pinning takes seconds): the arenas weights are read into, the read-ahead's
	// slots, the state and stash buffers. 0 once the buffers kept from earlier waves (or pinned by
	// Engine.PinHostBuffers) served every need. One device only (0 over EngineOptions.Devices).
	HostAllocBytes int64
	Seconds        float64
}

// BytesRead is the total of weight bytes the wave sent to the backend, from the checkpoint or the host
// cache (global weights are resident and not counted).
func (s WaveStats) BytesRead() int64 {
	var n int64
	for i := range s.LayerBytes {
		n += s.LayerBytes[i] + s.ExpertBytes[i]
	}
	return n
}

// Run replays every sequence of every request as one layer-major wave and returns, per request, one
// Result per sequence. Each sequence's results are bit-identical to replaying it alone. The wave is
// planned first (WavePlan: slices, where the state lives, reads): when the requests hold more tokens than
// EngineOptions.MaxWaveTokens or than the memory budgets let one wave hold, the sequences are split over
// several waves (each wave reads the weights again) and the results put back in order; a request the
// budgets cannot hold at all, or a single sequence longer than MaxWaveTokens, is refused with the bound
// named before any compute.
func (e *Engine) Run(ctx context.Context, reqs []Request) ([][]Result, WaveStats, error) {
	if e.opts.PlanOnly {
		return nil, WaveStats{}, ErrPlanOnly
	}
	if e.group != nil { // several devices (EngineOptions.Devices): devices.go
		return e.group.run(ctx, reqs)
	}
	limit := e.opts.MaxWaveTokens
	total := 0
	var lens []int
	for i := range reqs {
		for j, s := range reqs[i].Sequences {
			if limit > 0 && len(s.Tokens) > limit {
				return nil, WaveStats{}, fmt.Errorf("request %d: sequence %d has %d tokens, more than the %d a wave may hold (MaxWaveTokens)", i, j, len(s.Tokens), limit)
			}
			total += len(s.Tokens)
			lens = append(lens, len(s.Tokens))
		}
	}
	// Plan before any compute: a request the budgets cannot hold is refused here, with the budget named.
	p, err := e.planWave(lens)
	if err != nil {
		return nil, WaveStats{}, err
	}
	limit = p.WaveTokens
	if e.fitTokens > 0 && e.fitTokens < limit {
		// A larger wave ran out of device memory before: keep below it (a longer sequence runs alone).
		limit = max(e.fitTokens, p.Longest)
	}
	before := e.hostAllocated()
	var res [][]Result
	var st WaveStats
	if total <= limit {
		res, st, err = e.runFitted(ctx, reqs, total, &p)
	} else {
		e.log(p.String())
		res, st, err = e.runSplit(ctx, reqs, limit)
	}
	st.HostAllocBytes = e.hostAllocated() - before
	return res, st, err
}

// hostAllocated is the bytes of host buffers the engine has allocated, ever: its pool's arenas (layer
// reads, expert batches, the read-ahead's slots) and its state buffers.
func (e *Engine) hostAllocated() int64 {
	return e.pool.allocated.Load() + e.state.allocatedBytes()
}

// log hands a line to EngineOptions.Log.
func (e *Engine) log(s string) {
	if e.opts.Log != nil {
		e.opts.Log(s)
	}
}

// runFitted runs reqs (total tokens) as one wave, and when the backend runs out of device memory for it,
// as waves of half the tokens (and so on, down to one sequence a wave): the results are the same bits,
// since a sequence's results do not depend on its wave. The engine then keeps its waves below the size
// that failed. A single sequence that does not fit fails with the backend's error.
func (e *Engine) runFitted(ctx context.Context, reqs []Request, total int, plan *WavePlan) ([][]Result, WaveStats, error) {
	res, st, err := e.runWave(ctx, reqs, plan)
	if err == nil || !errors.Is(err, ops.ErrOutOfMemory) || ctx.Err() != nil {
		return res, st, err
	}
	// The plan accepted this wave and the device still ran out: the plan's memory model is wrong for
	// this backend (a bug to report). Halving keeps the results right at the cost of more weight reads.
	e.log(fmt.Sprintf("warning: out of device memory in a wave of %d tokens that the plan accepted (%s): "+
		"retrying in smaller waves, each reading the weights again; please report this with the plan line: %v",
		total, e.plan, err))
	longest, seqs := 0, 0
	for _, r := range reqs {
		for _, s := range r.Sequences {
			longest, seqs = max(longest, len(s.Tokens)), seqs+1
		}
	}
	if seqs < 2 {
		return nil, st, fmt.Errorf("a sequence of %d tokens alone does not fit in the device's memory "+
			"beside %.1f GB of resident layers and %s routed experts at once (EngineOptions.ResidentBytes "+
			"and ExpertChunk, --resident and --expert-chunk): %w", total, float64(e.kept.bytes())/1e9, chunkWords(e.opts.ExpertChunk), err)
	}
	half := max(total/2, longest) // < total: there are two sequences or more
	if e.fitTokens == 0 || half < e.fitTokens {
		e.fitTokens = half
	}
	return e.runSplit(ctx, reqs, half)
}

// chunkWords says how many routed experts a layer holds at once.
func chunkWords(chunk int) string {
	if chunk <= 0 {
		return "all chosen"
	}
	return fmt.Sprintf("up to %d", chunk)
}

// runSplit runs the sequences of reqs in waves of at most limit tokens, in order, and reassembles them.
func (e *Engine) runSplit(ctx context.Context, reqs []Request, limit int) ([][]Result, WaveStats, error) {
	out := make([][]Result, len(reqs))
	var all WaveStats
	type origin struct{ req, seq int }
	var wave []Request
	var from []origin
	tokens := 0
	flush := func() error {
		if len(wave) == 0 {
			return nil
		}
		res, st, err := e.runFitted(ctx, wave, tokens, nil)
		if err != nil {
			return err
		}
		i := 0
		for _, r := range res {
			for _, one := range r {
				o := from[i]
				one.SeqID = int32(o.seq)
				out[o.req][o.seq] = one
				i++
			}
		}
		all = all.add(st)
		wave, from, tokens = nil, nil, 0
		return nil
	}
	for ri, r := range reqs {
		out[ri] = make([]Result, len(r.Sequences))
		for si, s := range r.Sequences {
			if tokens+len(s.Tokens) > limit {
				if err := flush(); err != nil {
					return nil, all, err
				}
			}
			wave = append(wave, Request{Sequences: []Sequence{s}, Options: r.Options})
			from = append(from, origin{ri, si})
			tokens += len(s.Tokens)
		}
	}
	if err := flush(); err != nil {
		return nil, all, err
	}
	return out, all, nil
}

// add sums two waves' accounting (for a request split over several waves).
func (s WaveStats) add(o WaveStats) WaveStats {
	if s.LayerBytes == nil {
		return o
	}
	s.Sequences += o.Sequences
	s.Tokens += o.Tokens
	s.Seconds += o.Seconds
	s.ReadAheadUnused += o.ReadAheadUnused
	s.ReadAheadBytes += o.ReadAheadBytes
	for i := range s.LayerBytes {
		s.LayerBytes[i] += o.LayerBytes[i]
		s.ExpertBytes[i] += o.ExpertBytes[i]
		s.ExpertsRead[i] += o.ExpertsRead[i]
		s.CachedBytes[i] += o.CachedBytes[i]
	}
	return s
}

// runWave runs the requests as one wave. given, when not nil, is the plan Run made of exactly these
// requests; else runWave makes it.
func (e *Engine) runWave(ctx context.Context, reqs []Request, given *WavePlan) ([][]Result, WaveStats, error) {
	start := time.Now()
	// A backend that computes in this process (the CPU's) stops its op in flight when ctx ends: one op of
	// a long sequence can take minutes, and the checks below come between layers and sublayers.
	defer ops.Interrupt(e.Model.Ops, ctx)()
	layers := len(e.Plan.Layers)
	in, err := e.waveInputs(reqs)
	if err != nil {
		return nil, WaveStats{}, err
	}
	seqs, layout, ids, targets := in.seqs, in.layout, in.ids, in.targets
	var plan WavePlan
	if given != nil {
		plan = *given
	} else {
		seqLens := make([]int, len(seqs))
		for i, s := range seqs {
			seqLens[i] = len(s.Tokens)
		}
		if plan, err = e.planWave(seqLens); err != nil {
			return nil, WaveStats{}, err
		}
	}
	if plan.Slices == 1 {
		plan.SliceTokens = 0
	}
	if e.feed != nil { // over several devices the feed reads every expert once for all (feed.go)
		plan.ExpertReadAhead, plan.readAheadOff = 0, ""
	}
	e.plan = plan
	e.log(plan.String())
	stats := WaveStats{Sequences: len(seqs), Tokens: len(ids), LayerBytes: make([]int64, layers),
		ExpertBytes: make([]int64, layers), ExpertsRead: make([]int, layers), CachedBytes: make([]int64, layers)}
	obs := &capture{router: in.router, mixes: in.mixes}
	experts := &expertReader{r: e.reader, m: e.Model, pool: e.pool, cache: e.cache, held: &e.held,
		counts: make([]expertCounts, layers)}
	defer experts.unusedAll()                               // the next layer's experts, fetched ahead, when a layer failed
	experts.ahead = e.startAhead(ctx, plan.ExpertReadAhead) // nil over several devices (above)
	defer experts.ahead.close()                             // a failed wave's read-ahead stops and gives its buffers back
	pass := &model.Pass{Ctx: ctx, Model: e.Model, Layout: layout, Experts: experts, Obs: obs,
		ExpertChunk: plan.ExpertChunk, PrefetchExperts: e.opts.PrefetchExperts,
		SliceTokens: plan.SliceTokens, HostState: plan.HostState, DeviceSlices: plan.DeviceSlices,
		ExpertMajor: plan.ExpertMajor, PoolBytes: plan.ExpertPool, StashOnDevice: plan.StashOnDevice, PrefetchMajor: plan.Pooled, CallPairs: plan.CallPairs, FoldMajor: plan.FoldMajor && !e.noFold, Host: e.state}
	e.state.begin()
	// after the wave's state is freed (deferred below): its host buffers go back to the engine
	defer func() { _ = pass.Close() }() // its error, the queued copies', is the readout's to report (below)
	if e.feed != nil {
		pass.Experts = e.feed.experts(experts)
	}
	w := &waveOut{lens: map[int][]ops.TokenStats{}, hidden: map[int][]float32{}}

	st, err := pass.Embed(e.globals, ids)
	if err != nil {
		return nil, stats, err
	}
	defer st.Free(e.Model.Ops)
	// read starts reading layer i's own weights, unless they are resident (nil then).
	read := func(i int) *bundle {
		if e.kept.get(i) != nil {
			return nil
		}
		if e.feed != nil { // one of several devices: read once for all (feed.go)
			return e.feed.layer(ctx, i)
		}
		return readAhead(ctx, e.reader, e.Plan.LayerTensors(i), e.pool, &e.held, e.cache, i)
	}
	// held is the layer whose folded last phase is pending, with the weights that phase reads
	var held *model.LayerWeights
	defer func() { e.Model.FreeLayer(held) }()
	next := read(0)
	experts.ahead.layer(0, next) // a MoE layer's experts are read once its own weights are
	for i := 0; i < layers; i++ {
		// A cancelled wave stops before its next layer, even when that layer's weights need no read that
		// would notice (resident, or in the host cache).
		if err := ctx.Err(); err != nil {
			next.release(e.pool, &e.held, e.cache)
			return nil, stats, err
		}
		layerStart := time.Now()
		cur := next
		lw := e.kept.get(i)
		resident := lw != nil
		if !resident {
			var err error
			lw, err = e.Model.LoadLayer(ctx, i, cur)
			cur.release(e.pool, &e.held, e.cache)
			if err != nil {
				return nil, stats, err
			}
			stats.LayerBytes[i] = cur.size
			if cur.hit {
				stats.CachedBytes[i] = cur.size
			}
		}
		// Read the next layer while this one computes: at most two layers of weights are held.
		if i+1 < layers {
			next = read(i + 1)
			experts.ahead.layer(i+1, next)
		}
		err := pass.Layer(st, lw)
		if held != nil && pass.Pending() != held { // its folded last phase ran in this layer's first sweep
			e.Model.FreeLayer(held)
			held = nil
		}
		if !resident && (err != nil || !e.kept.keep(i, lw, stats.LayerBytes[i])) && pass.ReleaseLayer(lw) {
			held = lw // its last phase waits for the next sweep (model.Pass.FoldMajor)
		}
		if err != nil {
			if i+1 < layers {
				next.release(e.pool, &e.held, e.cache)
			}
			return nil, stats, err
		}
		stats.ExpertBytes[i] = experts.counts[i].bytes.Load()
		stats.ExpertsRead[i] = int(experts.counts[i].count.Load())
		stats.CachedBytes[i] += experts.counts[i].cached.Load()
		experts.ahead.chose(i, stats.ExpertsRead[i])
		if err := e.captureLayer(pass, st, i, in.hidden, in.lens, targets, in.topK, w); err != nil {
			if i+1 < layers {
				next.release(e.pool, &e.held, e.cache)
			}
			return nil, stats, err
		}
		if e.opts.Progress != nil {
			el := time.Since(start).Seconds()
			p := Progress{Layer: i + 1, Layers: layers, Tokens: len(ids),
				BytesRead: stats.BytesRead(), Seconds: el, ETASeconds: el / float64(i+1) * float64(layers-i),
				Plan: plan.String()}
			// sliced, the routing of every slice reaches the observer at the layer's end: no router time
			if obs.routedAt.After(layerStart) && !pass.Sliced() {
				p.RoutedSeconds = obs.routedAt.Sub(layerStart).Seconds()
			}
			e.opts.Progress(p)
		}
	}
	experts.ahead.close() // every layer is done: the read-ahead's buffers go back before the readout
	stats.ReadAheadUnused, stats.ReadAheadBytes = experts.ahead.unusedBytes(), experts.ahead.usedBytes()
	if err := ctx.Err(); err != nil {
		return nil, stats, err
	}
	final, err := e.readout(pass, st, targets, in.topK)
	if err == nil {
		err = pass.Close() // the queued copies of host state, every one done (hostbufs.go)
	}
	if err != nil {
		return nil, stats, err
	}
	stats.Seconds = time.Since(start).Seconds()
	return split(reqs, layout, seqs, targets, final, w, obs, e.Model.Dims.Hidden, layers-1), stats, nil
}

// waveInputs is a wave's requests laid end to end: the sequences in order, their layout in the wave's
// rows, the token ids, each row's target (the next token, -1 at a sequence's end), and the union of what
// the requests asked for.
type waveInputs struct {
	seqs          []Sequence
	layout        ops.Layout
	ids, targets  []int32
	topK          int
	hidden, lens  []int
	router, mixes bool
}

// waveInputs validates each request against the model and lays the wave out.
func (e *Engine) waveInputs(reqs []Request) (waveInputs, error) {
	in := waveInputs{layout: ops.Layout{Starts: []int{0}}}
	for i := range reqs {
		if err := reqs[i].Validate(e.Model.Dims.Vocab, len(e.Plan.Layers), Limits{}); err != nil {
			return in, fmt.Errorf("request %d: %w", i, err)
		}
		o := reqs[i].Options
		in.topK = max(in.topK, o.TopK)
		in.hidden, in.lens = union(in.hidden, o.Hidden), union(in.lens, o.Lens)
		in.router, in.mixes = in.router || o.Router, in.mixes || o.AttnRes
		for _, s := range reqs[i].Sequences {
			in.seqs = append(in.seqs, s)
			in.ids = append(in.ids, s.Tokens...)
			in.targets = append(in.targets, s.Tokens[1:]...)
			in.targets = append(in.targets, -1)
			in.layout.Starts = append(in.layout.Starts, len(in.ids))
		}
	}
	return in, nil
}

// waveOut holds the per-layer captures of the whole wave before they are split per sequence.
type waveOut struct {
	lens   map[int][]ops.TokenStats
	hidden map[int][]float32
}

// captureLayer takes the hidden states and lens readouts the wave asked for after layer i.
func (e *Engine) captureLayer(pass *model.Pass, st *model.Wave, i int, hidden, lens []int, targets []int32, topK int, w *waveOut) error {
	if slices.Contains(hidden, i) {
		v, err := pass.Hidden(st)
		if err != nil {
			return fmt.Errorf("layer %d: hidden state: %w", i, err)
		}
		w.hidden[i] = v
	}
	if slices.Contains(lens, i) {
		s, err := e.readout(pass, st, targets, topK)
		if err != nil {
			return fmt.Errorf("layer %d: lens: %w", i, err)
		}
		w.lens[i] = s
	}
	return nil
}

// readout is the output path (output mix, norm, lm_head reductions) on the current state.
func (e *Engine) readout(pass *model.Pass, st *model.Wave, targets []int32, topK int) ([]ops.TokenStats, error) {
	return pass.ReadoutStats(e.globals, st, targets, topK)
}
