package replay

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Reading a wave's routed experts from the checkpoint ahead of the router.
//
// Without it a layer's routed experts are read only once its first slice's router has chosen them, so on
// a disk-bound pass the disk idles while a layer's attention and router run, and the compute waits for
// the whole read (run 33: 1,048,576 tokens from disk took 1.95 times the disk's time). A wave large
// enough to choose nearly every expert (model.CoversExperts) will read nearly all of them anyway, so the
// engine reads them before it knows: as soon as a MoE layer's own weights are read (while the layer before
// computes), a goroutine reads its experts in ascending id order, the order the router's chunks ask for
// them, in batches into page-locked host buffers (slots), bounded by the host memory the plan grants
// (WavePlan.ExpertReadAhead). The Experts call of the layer then uploads what the read-ahead holds from
// those buffers (waiting for a batch still being read), and reads itself only what the read-ahead has not
// started: an expert is read once, by one of the two. A slot goes back when every expert in it is
// uploaded, or at the layer's end for the experts no token chose (counted in WaveStats.ReadAheadUnused).
// The bytes uploaded, the upload calls and so the results are the same with or without it.

// aheadInFlight is how many read-ahead batches are read at once: as for the experts read after the router
// (readsAhead), more than one keeps the checkpoint reader's workers busy between batches, and few keep the
// batches finishing in ascending order.
const aheadInFlight = 3

// aheadBytesPerExpert is an upper bound of the arena bytes one expert takes in a slot: its tensors, each
// placed as arenaLayout places it (a fresh page, then its file offset modulo the page size).
func aheadBytesPerExpert(p *model.Plan) int64 {
	var n int64
	for i, l := range p.Layers {
		if l.FFN != model.MoE {
			continue
		}
		var one int64
		for _, s := range p.ExpertTensors(i, 0) {
			one += s.Bytes() + 2*arenaAlign
		}
		n = max(n, one)
	}
	return n
}

// readAheadBudget is the host memory the wave of plan p may hold in experts read ahead of their routers
// (0: no read-ahead): none when EngineOptions.ExpertReadAhead is negative, when the model has no MoE
// layer, or when the wave is too small to choose nearly every expert; else EngineOptions.ExpertReadAhead
// (by default one MoE layer's experts), within what the host budget leaves after the state kept in host
// memory (on a backend that computes in host memory, all the wave holds: sharedMemory), the host cache's
// budget and the engine's other read buffers (two layers' own weights and the batches read after the
// router).
//
// When the wave is large enough but the budget leaves no room, why is the second result, for the plan line.
func (e *Engine) readAheadBudget(p WavePlan) (int64, string) {
	per := aheadBytesPerExpert(e.Plan)
	tokens := min(p.Tokens, p.WaveTokens)
	if e.opts.ExpertReadAhead < 0 || per == 0 || !model.CoversExperts(e.Model.Dims, tokens) {
		return 0, ""
	}
	if moe := e.Plan.MoELayers(); moe > 0 && e.cache.expertCount() == moe*e.Model.Dims.Experts {
		// nothing left to read: pinning the slots would cost seconds for nothing (run 40: the bench's
		// timed wave freed 16 GB of idle slots, 2.3 s, after a warm-up had filled the cache)
		return 0, "experts not read ahead: the host cache holds every routed expert"
	}
	slot := e.aheadSlotBytes()
	want := e.opts.ExpertReadAhead
	if want == 0 { // a whole layer's experts, in slots
		batch := e.aheadBatchSize()
		want = int64((e.Model.Dims.Experts+batch-1)/batch) * slot
	}
	reserve := e.hostReadBuffers()
	if want < slot {
		return 0, fmt.Sprintf("experts not read ahead: %s (EngineOptions.ExpertReadAhead) is less than a batch of experts (%s)", numtext.Bytes(want), numtext.Bytes(slot))
	}
	reserve += p.StashBytes // expert-major: the slices' expert inputs and shared outputs
	held, what := p.HostBytes, "state"
	if e.sharedMemory() { // the backend computes in host memory: all it holds is the host's
		held, what = p.DevicePeak+p.HostBytes, fmt.Sprintf("the %s backend's weights, state and activations", e.Model.Ops.Name())
	}
	n := min(want, p.HostBudget-held-reserve)
	if n < slot {
		return 0, fmt.Sprintf("experts not read ahead: the host budget of %s leaves %s after %s of %s and %s of other buffers, less than a batch of experts (%s)",
			numtext.Bytes(p.HostBudget), numtext.Bytes(max(p.HostBudget-held-reserve, 0)), numtext.Bytes(held), what, numtext.Bytes(reserve), numtext.Bytes(slot))
	}
	return n / slot * slot, ""
}

// hostReadBuffers is the host memory a wave's reads hold besides its state and the read-ahead: two layers'
// own weights (the one computing and the next, read during it), the batches of experts read after a
// router, and what the host cache may still grow by (hostCache.room). The planner sizes the state within
// the host budget less this, and the read-ahead within what both leave.
func (e *Engine) hostReadBuffers() int64 {
	var own int64
	for i := range e.Plan.Layers {
		o, _ := e.Plan.LayerBytes(i)
		own = max(own, o)
	}
	reserve := 2*own + (readsAhead+2)*int64(expertBatch)*aheadBytesPerExpert(e.Plan)
	return reserve + e.cache.room(e.Plan)
}

// aheadSlotBytes is the size of one read-ahead slot: a batch of experts, whole pages.
func (e *Engine) aheadSlotBytes() int64 {
	return int64(alignUp(int(int64(e.aheadBatchSize())*aheadBytesPerExpert(e.Plan)), arenaAlign))
}

// aheadBatchSize is how many experts one read-ahead batch (one slot) holds: expertBatch, unless a test
// set aheadBatch.
func (e *Engine) aheadBatchSize() int {
	if e.aheadBatch > 0 {
		return e.aheadBatch
	}
	return expertBatch
}

// expertAhead is one wave's read-ahead of routed experts (see the top of this file). Its methods are safe
// for concurrent use; a nil *expertAhead reads nothing ahead.
type expertAhead struct {
	r     Reader
	plan  *model.Plan
	pool  *hostPool
	cache *hostCache
	held  *atomic.Int64 // the engine's count of host bytes read and not yet uploaded
	slab  *aheadSlab    // under mu
	slots int           // the most slots this wave may use
	batch int           // experts a slot holds

	ctx    context.Context
	cancel context.CancelFunc
	jobs   chan *aheadLayer
	wg     sync.WaitGroup // the worker and the reads it started
	wake   chan struct{}  // a slot came back or a layer ended: the worker looks again
	reads  chan struct{}  // aheadInFlight tokens: batches being read

	mu     sync.Mutex
	layers map[int]*aheadLayer
	// inUse is the slots taken from the slab now, peak the most at once: the slots kept idle for the
	// next wave, so that a wave that reads nothing ahead (all in the host cache) keeps none pinned.
	inUse, peak int
	// skip is set when the last MoE layer done chose fewer than 90% of its experts (as prefetch's rule):
	// reading all of a layer's experts would then read too many for nothing.
	skip   atomic.Bool
	unused atomic.Int64 // bytes read ahead and never uploaded (no token chose those experts)
	used   atomic.Int64 // bytes read ahead and uploaded
}

// aheadLayer is the read-ahead of one MoE layer. Under expertAhead.mu.
type aheadLayer struct {
	layer   int
	own     *bundle // the layer's own weights, read first; nil when resident
	ids     []int   // experts to read, ascending
	next    int     // ids[next:] are not issued yet
	claimed map[int]bool
	experts map[int]*aheadExpert // issued and not yet handed out
	dropped bool                 // the layer is over: nothing more is read or handed out
}

// aheadExpert is an expert read (or being read) ahead, with its tensors' bytes inside its batch's slot.
type aheadExpert struct {
	id   int
	b    *aheadBatch
	src  mapSource
	size int64
}

// aheadBatch is one slot being read or read. done is closed when the read is over; err may be looked at
// only after that. refs (under expertAhead.mu) counts the experts not handed back, plus one while the
// read runs; the slot goes back when it drops to 0.
type aheadBatch struct {
	layer  int
	ids    []int
	srcs   []mapSource
	arena  []byte
	size   int64 // tensor bytes, counted in held while the slot is in use
	done   chan struct{}
	err    error
	refs   int
	used   int   // experts uploaded from the slot
	wasted int64 // bytes of experts handed back unused
}

// startAhead starts the read-ahead of a wave whose plan grants budget bytes (nil: none).
func (e *Engine) startAhead(ctx context.Context, budget int64) *expertAhead {
	slots := e.fitSlab(budget)
	if slots < 1 {
		return nil
	}
	a := &expertAhead{r: e.reader, plan: e.Plan, pool: e.pool, cache: e.cache, held: &e.held, slab: &e.slab,
		slots: slots, batch: e.aheadBatchSize(), jobs: make(chan *aheadLayer, len(e.Plan.Layers)), wake: make(chan struct{}, 1),
		reads: make(chan struct{}, aheadInFlight), layers: map[int]*aheadLayer{}}
	a.ctx, a.cancel = context.WithCancel(ctx)
	a.wg.Add(1)
	go a.run()
	return a
}

// layer queues the read-ahead of layer i's experts (when it is a MoE layer), to start once own (its own
// weights; nil when resident) is read and the layers queued before have issued all their reads. The host
// cache's experts are left out: they need no read.
func (a *expertAhead) layer(i int, own *bundle) {
	if a == nil || a.plan.Layers[i].FFN != model.MoE {
		return
	}
	l := &aheadLayer{layer: i, own: own, claimed: map[int]bool{}, experts: map[int]*aheadExpert{}}
	for id := range a.plan.Config.NumExperts {
		if _, ok := a.cache.expert(i, id); !ok {
			l.ids = append(l.ids, id)
		}
	}
	a.mu.Lock()
	a.layers[i] = l
	a.mu.Unlock()
	a.jobs <- l // never blocks: one job a layer at most
}

// chose tells the read-ahead how many experts MoE layer i chose, once it is done: below 90% of them the
// later layers are not read ahead (a wave that chooses few experts would read many for nothing).
func (a *expertAhead) chose(i, n int) {
	if a == nil || a.plan.Layers[i].FFN != model.MoE {
		return
	}
	a.skip.Store(10*n < 9*a.plan.Config.NumExperts)
}

// signal wakes the worker if it waits for a slot.
func (a *expertAhead) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// run is the worker: layer after layer, in the order queued, it issues the reads of every expert not
// claimed by the layer's Experts calls, as slots and read tokens allow.
func (a *expertAhead) run() {
	defer a.wg.Done()
	for {
		var l *aheadLayer
		select {
		case l = <-a.jobs:
		case <-a.ctx.Done():
			return
		}
		if l.own != nil {
			select {
			case <-l.own.done:
			case <-a.ctx.Done():
				return
			}
		}
		if a.skip.Load() || (l.own != nil && l.own.err != nil) { // the layer fails to load without its experts' help
			continue
		}
		for a.issue(l) {
		}
	}
}

// issue reads the next batch of layer l's unclaimed experts into a slot and reports whether there may be
// more to read. It waits for a slot and a read token first, so that an expert is marked issued only when
// its read can start: an Experts call waits only for reads that need nothing it holds.
func (a *expertAhead) issue(l *aheadLayer) bool {
	arena := a.acquire(l)
	if arena == nil {
		return false
	}
	select {
	case a.reads <- struct{}{}:
	case <-a.ctx.Done():
		a.putSlot(arena)
		return false
	}
	a.mu.Lock()
	var ids []int
	for ; l.next < len(l.ids) && len(ids) < a.batch && !l.dropped; l.next++ {
		if id := l.ids[l.next]; !l.claimed[id] {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		a.mu.Unlock()
		<-a.reads
		a.putSlot(arena)
		return false
	}
	b := &aheadBatch{layer: l.layer, ids: ids, srcs: make([]mapSource, len(ids)), arena: arena,
		done: make(chan struct{}), refs: len(ids) + 1}
	var reqs []checkpoint.ReadRequest
	var flat []checkpoint.Tensor
	for _, id := range ids {
		for _, s := range a.plan.ExpertTensors(l.layer, id) {
			t, err := lookup(a.r, s)
			if err != nil && b.err == nil {
				b.err = err
			}
			flat = append(flat, t)
		}
	}
	lay := layout(flat)
	if b.err == nil && lay.size > len(arena) {
		b.err = fmt.Errorf("experts %d-%d of layer %d: %d bytes do not fit a read-ahead slot of %d", ids[0], ids[len(ids)-1], l.layer, lay.size, len(arena))
	}
	k := 0
	for j, id := range ids {
		ex := &aheadExpert{id: id, b: b, src: mapSource{}}
		for _, s := range a.plan.ExpertTensors(l.layer, id) {
			if b.err == nil {
				buf := lay.slice(arena, flat, k)
				ex.src[s.Name] = buf
				reqs = append(reqs, checkpoint.ReadRequest{Tensor: flat[k], Dst: buf})
			}
			ex.size += flat[k].Size
			k++
		}
		b.srcs[j] = ex.src
		b.size += ex.size
		l.experts[id] = ex
	}
	more := l.next < len(l.ids)
	a.mu.Unlock()
	a.held.Add(b.size)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if b.err == nil {
			if b.err = a.r.ReadBatch(a.ctx, reqs); b.err == nil {
				b.err = checkScales(reqs)
			}
		}
		<-a.reads
		// The read's reference goes before done is closed, so that the last reference of a batch whose
		// experts were all uploaded is always the uploader's: that is where the host cache may take the slot.
		a.unref(b, nil, false)
		close(b.done)
	}()
	return more
}

// acquire returns a free slot (an idle one, or a new one while the wave's share allows), waiting for one to
// come back; nil when layer l needs no more reads or the read-ahead stops.
func (a *expertAhead) acquire(l *aheadLayer) []byte {
	for {
		a.mu.Lock()
		if l.dropped || l.next >= len(l.ids) {
			a.mu.Unlock()
			return nil
		}
		if n := len(a.slab.idle); n > 0 {
			arena := a.slab.idle[n-1]
			a.slab.idle = a.slab.idle[:n-1]
			a.taken()
			a.mu.Unlock()
			return arena
		}
		grow := a.slab.n < a.slots
		if grow {
			a.slab.n++
			a.taken()
		}
		size := a.slab.size
		a.mu.Unlock()
		if grow {
			arena, err := a.pool.get(size)
			if err != nil { // the experts left are read after the router, as without read-ahead
				a.mu.Lock()
				a.slab.n--
				a.inUse--
				a.mu.Unlock()
				return nil
			}
			return arena[:size:size]
		}
		select {
		case <-a.wake:
		case <-a.ctx.Done():
			return nil
		}
	}
}

// taken counts a slot taken from the slab. Under mu.
func (a *expertAhead) taken() {
	a.inUse++
	a.peak = max(a.peak, a.inUse)
}

// putSlot gives a slot back to the slab and wakes the worker.
func (a *expertAhead) putSlot(arena []byte) {
	a.mu.Lock()
	a.slab.idle = append(a.slab.idle, arena)
	a.inUse--
	a.mu.Unlock()
	a.signal()
}

// unref drops one reference of batch b: the read's (ex nil), or expert ex's, uploaded from the slot
// (used) or handed back unused. The last one gives the slot back: to the host cache when every expert of
// the batch was uploaded from it and the cache has room, else to the slab.
func (a *expertAhead) unref(b *aheadBatch, ex *aheadExpert, used bool) {
	a.mu.Lock()
	b.refs--
	if used {
		b.used++
	} else if ex != nil {
		b.wasted += ex.size
	}
	last := b.refs == 0
	a.mu.Unlock()
	if !last {
		return
	}
	a.held.Add(-b.size)
	if b.err == nil {
		a.unused.Add(b.wasted)
	}
	if b.err == nil && b.used == len(b.ids) && a.cache.keepExperts(a.pool, b.layer, b.ids, b.srcs, b.arena) {
		a.pool.disown(b.arena)
		a.mu.Lock()
		a.slab.n-- // the cache keeps it; a new slot may take its place
		a.inUse--
		a.mu.Unlock()
		a.signal()
		return
	}
	a.putSlot(b.arena)
}

// claim splits ids (ascending, of MoE layer `layer`) into the experts the read-ahead has read or is
// reading, now handed to the caller (who uploads them and gives each back with handBack), and the rest,
// which the read-ahead will not read: the caller reads them.
func (a *expertAhead) claim(layer int, ids []int) (ahead []*aheadExpert, rest []int) {
	if a == nil {
		return nil, ids
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.layers[layer]
	if l == nil || l.dropped {
		return nil, ids
	}
	for _, id := range ids {
		if ex := l.experts[id]; ex != nil {
			ahead = append(ahead, ex)
			delete(l.experts, id)
		} else {
			l.claimed[id] = true
			rest = append(rest, id)
		}
	}
	return ahead, rest
}

// unusedBytes is the bytes read ahead that no Experts call took (WaveStats.ReadAheadUnused); 0 for nil.
func (a *expertAhead) unusedBytes() int64 {
	if a == nil {
		return 0
	}
	return a.unused.Load()
}

// usedBytes is the bytes read ahead and uploaded (WaveStats.ReadAheadBytes); 0 for nil.
func (a *expertAhead) usedBytes() int64 {
	if a == nil {
		return 0
	}
	return a.used.Load()
}

// handBack gives back experts claimed and not uploaded (after an error).
func (a *expertAhead) handBack(exs []*aheadExpert) {
	for _, ex := range exs {
		a.unref(ex.b, ex, false)
	}
}

// drop ends layer i's read-ahead: nothing more is read for it, and the experts read ahead and never
// claimed go back.
func (a *expertAhead) drop(i int) {
	if a == nil {
		return
	}
	a.mu.Lock()
	l := a.layers[i]
	delete(a.layers, i)
	var left []*aheadExpert
	if l != nil {
		l.dropped = true
		for _, ex := range l.experts {
			left = append(left, ex)
		}
		clear(l.experts)
	}
	a.mu.Unlock()
	a.handBack(left)
	a.signal()
}

// close stops the read-ahead at the end of the wave, however it ended: the worker and every read stop,
// and every slot goes back to the slab.
func (a *expertAhead) close() {
	if a == nil {
		return
	}
	a.cancel() // a second close finds nothing left to stop
	a.wg.Wait()
	a.mu.Lock()
	var layers []int
	for i := range a.layers {
		layers = append(layers, i)
	}
	a.mu.Unlock()
	for _, i := range layers {
		a.drop(i)
	}
	a.slab.fit(a.pool, a.slab.size, a.peak) // every slot is idle now
}

// upload waits for the experts claimed ahead (exs, ascending) and uploads them from their slots, the
// experts of one batch in one call, counting their bytes as read for the layer; every one is given back,
// uploaded or not. On an error (the batch's read error, which names the file and the tensor, or the
// upload's) the experts uploaded so far are freed by the caller with the rest of out.
func (x *expertReader) upload(ctx context.Context, layer int, exs []*aheadExpert, out *[]ops.Expert) error {
	for len(exs) > 0 {
		b := exs[0].b
		n := 1
		for n < len(exs) && exs[n].b == b {
			n++
		}
		group := exs[:n]
		var err error
		select {
		case <-b.done:
			err = b.err
		case <-ctx.Done():
			err = fmt.Errorf("experts of layer %d read ahead: %w", layer, context.Cause(ctx))
		}
		if err != nil {
			x.ahead.handBack(exs)
			return err
		}
		ids := make([]int, n)
		srcs := make([]model.Source, n)
		for i, ex := range group {
			ids[i], srcs[i] = ex.id, ex.src
		}
		got, err := x.m.LoadExperts(ctx, layer, ids, srcs)
		if err != nil {
			x.ahead.handBack(exs)
			return err
		}
		*out = append(*out, got...)
		for _, ex := range group {
			x.counts[layer].bytes.Add(ex.size)
			x.ahead.used.Add(ex.size)
			x.ahead.unref(b, ex, true)
		}
		x.counts[layer].count.Add(int64(n))
		exs = exs[n:]
	}
	return nil
}
