package replay

import (
	"context"
	"math"
	"sync"
	"sync/atomic"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
)

// feed is the one reader of a wave run over several devices (EngineOptions.Devices): every layer's own
// tensors and every routed expert some device's router chose are read once into host buffers of the
// primary engine's pool (page-locked on the CUDA backend, allocated portable, so every device's copy
// engine can read them), and each device uploads them from those same buffers. A buffer goes back to the
// pool, or to the shared host cache, once every device has uploaded it or has gone past the point where
// it could ask for it:
//
//   - a layer's own tensors: a device that asks for layer j has uploaded every layer below j (the wave
//     loop releases layer i before it reads layer i+1 ahead), so layer i is done when every device has
//     asked for a layer above it or finished its pass;
//   - an expert of layer L: when every device has uploaded it, or has asked for the experts of a later
//     layer, or finished.
//
// The devices' passes run concurrently (one goroutine each, every backend on its own OS thread). A
// device's read of layer i waits until every device has asked for layer i-window (a device with a
// smaller share would otherwise run ahead, and every layer it passed would stay in host memory for the
// others): so at most window+1 layers' own tensors, and the experts of about window layers, are held. Apart
// from that a pass waits for reads only, never for another device's compute, and reads start in
// ascending order, each device starting at most readsAhead batches of experts ahead of its own uploads,
// so a pass waiting for an expert another device claimed always finds that read started or startable
// (the lowest expert not yet read has an owner that can start it; a device held back by the window has
// claimed nothing another device still waits for, since all of those are of earlier layers).
type feed struct {
	r     Reader
	plan  *model.Plan
	pool  *hostPool  // the primary engine's: the host buffers every device uploads from
	cache *hostCache // the primary engine's host cache, shared by the devices; nil: none
	held  atomic.Int64
	read  atomic.Int64 // bytes fetched so far (from the checkpoint or the cache), for the progress line

	views sync.WaitGroup // the goroutines handing out layers (deviceFeed.layer), waited for by close

	mu         sync.Mutex
	moved      chan struct{} // closed (and replaced) whenever a layerNext grows
	layerNext  []int         // per device: it has uploaded every layer below (math.MaxInt once its pass ended)
	expertNext []int         // per device: it asks for no more experts of the layers below
	layers     map[int]*bundle
	experts    map[[2]int]*sharedExpert
	stats      WaveStats // per layer: bytes fetched once for all devices (Sequences, Tokens unset)
}

// sharedExpert is one routed expert read once for the devices of a wave. done is closed once src or err
// is set; the other fields are the feed's, under its mutex.
type sharedExpert struct {
	layer, id int
	done      chan struct{}
	src       mapSource
	size      int64
	cached    bool // served from the host cache: no buffer of its own
	err       error
	got       []bool       // per device: uploaded it
	batch     *sharedBatch // the read it came in; nil from the cache or when no read started
	endsBatch bool         // the last expert of a batch its claimer reads: uploading it frees one of that read's slots
}

// sharedBatch is one read of several experts into one arena, freed when all its experts are.
type sharedBatch struct {
	arena   []byte
	size    int64
	ids     []int
	srcs    []mapSource
	left    int  // experts not yet freed
	checked bool // read without error and scanned: the host cache may keep it
}

// newFeed makes the reader of one wave over n devices, on the primary engine's reader, pool and cache.
func newFeed(e *Engine, n int) *feed {
	layers := len(e.Plan.Layers)
	return &feed{r: e.reader, plan: e.Plan, pool: e.pool, cache: e.cache, moved: make(chan struct{}),
		layerNext: make([]int, n), expertNext: make([]int, n),
		layers: map[int]*bundle{}, experts: map[[2]int]*sharedExpert{},
		stats: WaveStats{LayerBytes: make([]int64, layers), ExpertBytes: make([]int64, layers),
			ExpertsRead: make([]int, layers), CachedBytes: make([]int64, layers)}}
}

// deviceFeed is one device's end of a feed: the engine's wave loop takes layer i's tensors from it
// (Engine.feed), and its pass's experts (pass.Experts).
type deviceFeed struct {
	f   *feed
	dev int
}

// window is how many layers a device's read may run ahead of the slowest device's.
const window = 2

// layer returns layer i's own tensors for the device at once; their read starts, unless a device has
// started it already, once every device has asked for layer i-window. The bundle shares the feed's
// bytes: releasing it frees nothing (it holds no arena).
func (d *deviceFeed) layer(ctx context.Context, i int) *bundle {
	f := d.f
	f.mu.Lock()
	if i > f.layerNext[d.dev] {
		f.layerNext[d.dev] = i
		f.wake()
	}
	done := f.doneLayers()
	f.mu.Unlock()
	f.releaseLayers(done)
	v := &bundle{done: make(chan struct{}), layer: i}
	f.views.Add(1)
	go func() {
		defer f.views.Done()
		defer close(v.done)
		if v.err = f.await(ctx, i-window); v.err != nil {
			return
		}
		f.mu.Lock()
		src := f.layers[i]
		if src == nil {
			src = readAhead(ctx, f.r, f.plan.LayerTensors(i), f.pool, &f.held, f.cache, i)
			f.layers[i] = src
		}
		f.mu.Unlock()
		<-src.done
		v.bytes, v.bad, v.err, v.size, v.hit = src.bytes, src.bad, src.err, src.size, src.hit
	}()
	return v
}

// wake tells the reads waiting for the window that a layerNext grew. Under f.mu.
func (f *feed) wake() {
	close(f.moved)
	f.moved = make(chan struct{})
}

// await waits until every device has asked for layer j (or ended its pass), or ctx ends.
func (f *feed) await(ctx context.Context, j int) error {
	for {
		f.mu.Lock()
		lo, moved := math.MaxInt, f.moved
		for _, n := range f.layerNext {
			lo = min(lo, n)
		}
		f.mu.Unlock()
		if lo >= j {
			return nil
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// doneLayers removes and returns the layers every device has uploaded. Under f.mu.
func (f *feed) doneLayers() []*bundle {
	lo := math.MaxInt
	for _, n := range f.layerNext {
		lo = min(lo, n)
	}
	var out []*bundle
	for i, b := range f.layers {
		if i < lo {
			out = append(out, b)
			delete(f.layers, i)
		}
	}
	return out
}

// releaseLayers counts the layers' bytes and gives their arenas back to the pool, or to the cache.
func (f *feed) releaseLayers(bs []*bundle) {
	for _, b := range bs {
		<-b.done
		size, hit, i := b.size, b.hit, b.layer
		b.release(f.pool, &f.held, f.cache)
		f.read.Add(size)
		f.mu.Lock()
		f.stats.LayerBytes[i] += size
		if hit {
			f.stats.CachedBytes[i] += size
		}
		f.mu.Unlock()
	}
}

// finish records that device dev's pass ended (however it ended) and frees what only it still held.
func (d *deviceFeed) finish() {
	f := d.f
	f.mu.Lock()
	f.layerNext[d.dev], f.expertNext[d.dev] = math.MaxInt, math.MaxInt
	f.wake()
	layers := f.doneLayers()
	experts := f.doneExperts(nil)
	f.mu.Unlock()
	f.releaseLayers(layers)
	f.releaseExperts(experts)
}

// close frees every buffer left, once every device's pass has ended, and returns the wave's reads.
func (f *feed) close() WaveStats {
	f.views.Wait() // none is left waiting: every pass ended, and the window is open
	f.mu.Lock()
	for i := range f.layerNext {
		f.layerNext[i], f.expertNext[i] = math.MaxInt, math.MaxInt
	}
	layers := f.doneLayers()
	experts := f.doneExperts(nil)
	f.mu.Unlock()
	f.releaseLayers(layers)
	f.releaseExperts(experts)
	return f.stats
}

// claim returns the entries of experts ids of layer for device dev, in the order of ids, and those of
// them that dev must read (no device had asked for them and the cache does not hold them), cut into
// batches of expertBatch. It also records that dev asks for no experts of earlier layers, and returns
// the entries that frees.
func (f *feed) claim(dev, layer int, ids []int) (all []*sharedExpert, mine [][]*sharedExpert, freed []*sharedExpert) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expertNext[dev] = max(f.expertNext[dev], layer)
	var own []*sharedExpert
	for _, id := range ids {
		k := [2]int{layer, id}
		s := f.experts[k]
		if s == nil {
			s = &sharedExpert{layer: layer, id: id, done: make(chan struct{}), got: make([]bool, len(f.layerNext))}
			if src, ok := f.cache.expert(layer, id); ok {
				s.src, s.size, s.cached = src, src.size(), true
				f.stats.ExpertBytes[layer] += s.size
				f.stats.CachedBytes[layer] += s.size
				f.stats.ExpertsRead[layer]++
				f.read.Add(s.size)
				close(s.done)
			} else {
				own = append(own, s)
			}
			f.experts[k] = s
		}
		all = append(all, s)
	}
	for start := 0; start < len(own); start += expertBatch {
		b := own[start:min(start+expertBatch, len(own))]
		b[len(b)-1].endsBatch = true
		mine = append(mine, b)
	}
	return all, mine, f.doneExperts(nil)
}

// doneExperts removes and returns the entries no device can still want (of only, when not nil; else
// of every entry). Under f.mu.
func (f *feed) doneExperts(of *sharedExpert) []*sharedExpert {
	free := func(s *sharedExpert) bool {
		for d, got := range s.got {
			if !got && f.expertNext[d] <= s.layer {
				return false
			}
		}
		return true
	}
	if of != nil {
		if !free(of) {
			return nil
		}
		delete(f.experts, [2]int{of.layer, of.id})
		return []*sharedExpert{of}
	}
	var out []*sharedExpert
	for k, s := range f.experts {
		if free(s) {
			out = append(out, s)
			delete(f.experts, k)
		}
	}
	return out
}

// releaseExperts frees the entries' batches once all their experts are freed: to the host cache when
// it has room and the read was clean, else to the pool. It waits for reads still in flight (only a pass
// that ended early leaves one).
func (f *feed) releaseExperts(ss []*sharedExpert) {
	for _, s := range ss {
		<-s.done
		f.mu.Lock()
		b := s.batch
		last := false
		if b != nil {
			b.left--
			last = b.left == 0
		}
		f.mu.Unlock()
		if !last {
			continue
		}
		f.held.Add(-b.size)
		if b.checked && f.cache.keepExperts(f.pool, s.layer, b.ids, b.srcs, b.arena) {
			f.pool.disown(b.arena)
		} else {
			f.pool.put(b.arena)
		}
	}
}

// readClaimed reads batches (experts of layer that device claimed), in order, each into its own arena
// and goroutine; before each it takes a slot, which the device gives back once it has uploaded the
// batch, so at most readsAhead of its batches are read and not yet uploaded by it. Every entry's done is
// closed, with an error if its read failed or never started (ctx cancelled, no arena).
func (f *feed) readClaimed(ctx context.Context, layer int, batches [][]*sharedExpert, ts [][][]checkpoint.Tensor, slots chan struct{}) {
	fail := func(from int, err error) {
		for _, b := range batches[from:] {
			for _, s := range b {
				s.err = err
				close(s.done)
			}
		}
	}
	for bi, batch := range batches {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			fail(bi, context.Cause(ctx))
			return
		}
		var flat []checkpoint.Tensor
		for _, t := range ts[bi] {
			flat = append(flat, t...)
		}
		l := layout(flat)
		arena, err := f.pool.get(l.size)
		if err != nil {
			fail(bi, err)
			return
		}
		sb := &sharedBatch{arena: arena, left: len(batch), srcs: make([]mapSource, len(batch))}
		reqs := make([]checkpoint.ReadRequest, 0, len(flat))
		for i, s := range batch {
			src := make(mapSource, len(ts[bi][i]))
			for _, t := range ts[bi][i] {
				buf := l.slice(arena, flat, len(reqs))
				src[t.Name] = buf
				reqs = append(reqs, checkpoint.ReadRequest{Tensor: t, Dst: buf})
				sb.size += t.Size
			}
			sb.ids, sb.srcs[i] = append(sb.ids, s.id), src
		}
		f.held.Add(sb.size)
		go func() {
			err := f.r.ReadBatch(ctx, reqs)
			if err == nil {
				err = checkScales(reqs)
			}
			f.mu.Lock()
			sb.checked = err == nil
			if err == nil {
				f.stats.ExpertBytes[layer] += sb.size
				f.stats.ExpertsRead[layer] += len(batch)
			}
			for i, s := range batch {
				s.batch, s.err = sb, err
				if err == nil {
					s.src, s.size = sb.srcs[i], sb.srcs[i].size()
				}
			}
			f.mu.Unlock()
			if err == nil {
				f.read.Add(sb.size)
			}
			for _, s := range batch {
				close(s.done)
			}
		}()
	}
}
