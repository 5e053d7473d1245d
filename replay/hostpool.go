package replay

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// hostPool hands out the host buffers the engine reads weights into, and takes them back for the next
// layer and the next wave. Reusing them saves zeroing a fresh buffer for every tensor of every layer and,
// on a backend with ops.HostMemory (the CUDA backend's pinned memory), lets the backend copy to the
// device straight from the buffer the checkpoint was read into. A buffer is an arena that holds a whole
// read (a layer's own tensors, or a batch of experts), the tensors sub-sliced from it.
//
// At most two layers' reads and a few expert batches are in use at once, so a handful of arenas serve a
// whole wave; idle ones beyond maxIdle are released, smallest first.
type hostPool struct {
	mem   ops.HostMemory // nil: ordinary Go memory
	mu    sync.Mutex
	idle  [][]byte // full arenas (len == cap), not in use
	total atomic.Int64
	// allocated is the bytes of every arena allocated, ever (WaveStats.HostAllocBytes takes its growth
	// during a wave)
	allocated atomic.Int64
	// plain holds the arenas in ordinary memory that stand in for the backend's when AllocHost failed
	// (page-locked memory is a limited resource: a large host cache may have taken it), by first byte.
	plain map[*byte]bool
}

// maxIdle bounds the idle arenas kept: two layer reads in flight plus the expert batches' pipeline.
const maxIdle = 6

// arenaAlign is where tensors start inside an arena, and the granularity of arena sizes: the page size,
// which is also what O_DIRECT reads need (checkpoint.DirectAlignment).
const arenaAlign = checkpoint.DirectAlignment

// newHostPool makes a pool on the backend's host memory when it has one.
func newHostPool(b ops.Backend) *hostPool {
	mem, _ := b.(ops.HostMemory)
	return &hostPool{mem: mem}
}

// get returns an arena of at least n bytes (its len is its full size): the smallest idle one that fits,
// or a new one.
func (p *hostPool) get(n int) ([]byte, error) {
	p.mu.Lock()
	best := -1
	for i, a := range p.idle {
		if len(a) >= n && (best < 0 || len(a) < len(p.idle[best])) {
			best = i
		}
	}
	if best >= 0 {
		a := p.idle[best]
		p.idle = slices.Delete(p.idle, best, best+1)
		p.mu.Unlock()
		return a, nil
	}
	p.mu.Unlock()
	size := max(alignUp(n, arenaAlign), arenaAlign)
	var a []byte
	if p.mem != nil {
		var err error
		if a, err = p.mem.AllocHost(size); err != nil {
			// Ordinary memory instead: uploads from it are slower (staged), but the wave goes on.
			a = checkpoint.AlignedBuffer(size, arenaAlign)
			p.mu.Lock()
			if p.plain == nil {
				p.plain = map[*byte]bool{}
			}
			p.plain[&a[0]] = true
			p.mu.Unlock()
		} else if len(a) < size {
			return nil, errors.Join(fmt.Errorf("host buffer of %d bytes: the backend returned %d", size, len(a)), p.mem.FreeHost(a))
		}
		a = a[:size:size]
	} else {
		a = checkpoint.AlignedBuffer(size, arenaAlign)
	}
	p.total.Add(int64(size))
	p.allocated.Add(int64(size))
	return a, nil
}

// put gives an arena from get back. Past maxIdle idle arenas the smallest is released.
func (p *hostPool) put(a []byte) {
	if cap(a) == 0 {
		return
	}
	a = a[:cap(a)]
	p.mu.Lock()
	p.idle = append(p.idle, a)
	var drop []byte
	if len(p.idle) > maxIdle {
		small := 0
		for i := range p.idle {
			if len(p.idle[i]) < len(p.idle[small]) {
				small = i
			}
		}
		drop = p.idle[small]
		p.idle = slices.Delete(p.idle, small, small+1)
	}
	p.mu.Unlock()
	if drop != nil {
		p.release(drop)
	}
}

// trim releases every idle arena (after the one-time read of the global weights, which are larger than
// any layer; and when the engine closes).
func (p *hostPool) trim() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	var errs []error
	for _, a := range idle {
		errs = append(errs, p.release(a))
	}
	return errors.Join(errs...)
}

// release frees one arena.
func (p *hostPool) release(a []byte) error {
	p.disown(a)
	return p.free(a)
}

// disown stops counting arena a as the pool's: the host cache has taken it (and frees it with free).
func (p *hostPool) disown(a []byte) { p.total.Add(-int64(cap(a))) }

// free returns arena a's memory to the backend (the garbage collector's without ops.HostMemory, or when
// it stood in for the backend's).
func (p *hostPool) free(a []byte) error {
	if p.mem == nil || cap(a) == 0 {
		return nil
	}
	a = a[:cap(a)]
	p.mu.Lock()
	plain := p.plain[&a[0]]
	delete(p.plain, &a[0])
	p.mu.Unlock()
	if plain {
		return nil
	}
	return p.mem.FreeHost(a)
}

// bytes is the host memory the pool holds, idle or in use.
func (p *hostPool) bytes() int64 {
	if p == nil {
		return 0
	}
	return p.total.Load()
}

// alignUp rounds n up to a multiple of a (a power of two).
func alignUp(n, a int) int { return (n + a - 1) &^ (a - 1) }

// arenaLayout places tensors in an arena (whose first byte is page-aligned): each starts in a fresh page,
// at the address congruent to its file offset modulo the page size, so that O_DIRECT reads of its middle
// segments land in place (checkpoint.Dir.ReadBatch) instead of through a bounce buffer.
type arenaLayout struct {
	offs []int // start of each tensor in the arena
	size int   // arena bytes needed
}

// layout computes the placement of ts, in order.
func layout(ts []checkpoint.Tensor) arenaLayout {
	l := arenaLayout{offs: make([]int, len(ts))}
	for i, t := range ts {
		start := alignUp(l.size, arenaAlign) + int(t.Offset%arenaAlign)
		l.offs[i] = start
		l.size = start + int(t.Size)
	}
	return l
}

// slice returns tensor i's bytes inside arena a.
func (l arenaLayout) slice(a []byte, ts []checkpoint.Tensor, i int) []byte {
	return a[l.offs[i] : l.offs[i]+int(ts[i].Size) : l.offs[i]+int(ts[i].Size)]
}
