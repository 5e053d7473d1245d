package replay

import (
	"errors"
	"sync"

	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// hostCache keeps weights read from the checkpoint in host memory across waves, up to a byte budget
// (EngineOptions.HostCacheBytes). On a backend with ops.HostMemory (the CUDA backend) that memory is
// page-locked, so a later wave sends those weights to the device at the host-to-device copy rate, with no
// read of the disk or the page cache and no copy by the CPU: on a host with the RAM for it (an 8-GPU
// server holds the whole 1.56 TB in host memory), only the first wave pays for the disk.
//
// The cache takes whole arenas from the pool once their bytes are uploaded and checked: a layer's own
// tensors, or a batch of experts. It fills first come, first kept, and never evicts: waves read the
// layers in order, so evicting the oldest would drop exactly what the next wave needs first. With a
// budget below the model's size, the first layers stay and the rest stream from the checkpoint.
//
// Cached bytes were scanned when they were read (NaN/Inf in BF16 and F32 tensors, the MXFP4 scale byte
// 255); a tensor that failed a check is never cached, so a damaged checkpoint fails every wave the same.
type hostCache struct {
	budget  int64
	mu      sync.Mutex
	used    int64                // arena bytes held
	layers  map[int]mapSource    // layer index -> its non-expert tensors
	experts map[[2]int]mapSource // (layer, expert) -> its six MXFP4 tensors
	counts  map[int]int          // layer index -> how many of its experts are held (room)
	arenas  [][]byte             // every arena held, released by clear
}

// newHostCache makes a cache of budget bytes; nil (no cache) for a budget <= 0.
func newHostCache(budget int64) *hostCache {
	if budget <= 0 {
		return nil
	}
	return &hostCache{budget: budget, layers: map[int]mapSource{}, experts: map[[2]int]mapSource{}, counts: map[int]int{}}
}

// layer returns the cached tensors of layer i, if any.
func (c *hostCache) layer(i int) (mapSource, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.layers[i]
	return s, ok
}

// expert returns the cached tensors of expert e of layer i, if any.
func (c *hostCache) expert(i, e int) (mapSource, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.experts[[2]int{i, e}]
	return s, ok
}

// stable marks arena immutable on a backend with ops.StableHostMemory (uploads from it then need not wait
// for their copies) and reports whether the cache may take it: always, unless marking failed.
func stable(pool *hostPool, arena []byte) bool {
	if s, ok := pool.mem.(ops.StableHostMemory); ok {
		return s.MarkStable(arena[:cap(arena)]) == nil
	}
	return true
}

// keepLayer takes arena (holding src, layer i's tensors; from pool) when the budget has room for it and
// reports whether it did; the caller then must not give the arena back to the pool, nor write it again.
func (c *hostCache) keepLayer(pool *hostPool, i int, arena []byte, src mapSource) bool {
	if c == nil || cap(arena) == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.layers[i]; dup || !c.fits(arena) || !stable(pool, arena) {
		return false
	}
	c.layers[i] = src
	c.take(arena)
	return true
}

// keepExperts takes arena (holding srcs, the tensors of experts ids of layer i) when the budget has room
// for it and reports whether it did.
func (c *hostCache) keepExperts(pool *hostPool, i int, ids []int, srcs []mapSource, arena []byte) bool {
	if c == nil || cap(arena) == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range ids {
		if _, dup := c.experts[[2]int{i, e}]; dup {
			return false // read again by a concurrent miss: keep the first copy only
		}
	}
	if !c.fits(arena) || !stable(pool, arena) {
		return false
	}
	for k, e := range ids {
		c.experts[[2]int{i, e}] = srcs[k]
	}
	c.counts[i] += len(ids)
	c.take(arena)
	return true
}

// fits reports whether arena fits in what is left of the budget. Under c.mu.
func (c *hostCache) fits(arena []byte) bool { return c.used+int64(cap(arena)) <= c.budget }

// take records arena as held. Under c.mu.
func (c *hostCache) take(arena []byte) {
	c.used += int64(cap(arena))
	c.arenas = append(c.arenas, arena[:cap(arena)])
}

// room is what the cache may still take: the room in its budget, and no more than what it does not
// hold of p's layers (each layer's own tensors and each routed expert, with the pages arenas give them:
// a batch the cache takes holds only experts it did not have). A cache that holds the whole model
// takes nothing more, however large its budget (run 135: 9 GB of a bench's host budget kept for a cache
// that held every expert).
func (c *hostCache) room(p *model.Plan) int64 {
	if c == nil {
		return 0
	}
	perExpert := aheadBytesPerExpert(p) + arenaAlign
	c.mu.Lock()
	defer c.mu.Unlock()
	var left int64
	for i, l := range p.Layers {
		if _, ok := c.layers[i]; !ok {
			left += arenaAlign
			for _, s := range p.LayerTensors(i) {
				left += s.Bytes() + 2*arenaAlign
			}
		}
		if l.FFN == model.MoE {
			left += int64(p.Config.NumExperts-c.counts[i]) * perExpert
		}
	}
	return max(0, min(c.budget-c.used, left))
}

// expertCount is how many routed experts the cache holds, over all layers.
func (c *hostCache) expertCount() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.experts)
}

// bytes is the host memory the cache holds.
func (c *hostCache) bytes() int64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

// clear empties the cache and releases its arenas through pool (which frees them with the backend).
func (c *hostCache) clear(pool *hostPool) error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	arenas := c.arenas
	c.arenas, c.used = nil, 0
	clear(c.layers)
	clear(c.experts)
	clear(c.counts)
	c.mu.Unlock()
	var errs []error
	for _, a := range arenas {
		errs = append(errs, pool.free(a))
	}
	return errors.Join(errs...)
}
