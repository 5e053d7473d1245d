package replay

import (
	"sync"
	"unsafe"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// stateBufs are the host buffers of the per-token state that slices keep in host memory and of
// expert-major stashes (model.HostBuffers): page-locked on a backend with ops.HostMemory, so that the
// copy engine moves them at the full rate and, with ops.QueuedBF16Transfer, without the host waiting
// (replay/model/hostbufs.go). Pinning runs at about 3 GB/s, so the engine keeps them from wave to wave:
// a wave reuses the last one's buffers of the sizes it asks for, and the first time it asks for a size
// none has, the buffers no wave has used since the last one began are released (sizes follow the plan:
// a wave planned alike takes the same ones again). Where pinning fails (page-locked memory is a limited
// resource) a buffer comes from the Go heap; its copies are then staged, with the same bits.
type stateBufs struct {
	mem  ops.HostMemory // nil: the Go heap
	mu   sync.Mutex
	idle map[int][][]uint16 // by length, not in use
	used map[*uint16]bool   // buffers handed out or given back since the wave began (begin)
	raw  map[*uint16][]byte // the AllocHost buffer behind each pinned one
	held int64              // bytes of every buffer, idle or in use
	made int                // buffers allocated, ever (for tests)
	// allocated is the bytes of every buffer allocated, ever (WaveStats.HostAllocBytes)
	allocated int64
}

// newStateBufs makes the buffers on b's host memory when it has one.
func newStateBufs(b ops.Backend) *stateBufs {
	mem, _ := b.(ops.HostMemory)
	return &stateBufs{mem: mem, idle: map[int][][]uint16{}, used: map[*uint16]bool{}, raw: map[*uint16][]byte{}}
}

// allocatedBytes is the bytes of every buffer allocated, ever.
func (s *stateBufs) allocatedBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.allocated
}

// begin starts a wave: the buffers it does not take stay idle until its first new size.
func (s *stateBufs) begin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.used)
}

// Get implements model.HostBuffers.
func (s *stateBufs) Get(n int) []uint16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.idle[n]; len(l) > 0 {
		b := l[len(l)-1]
		s.idle[n] = l[:len(l)-1]
		s.used[unsafe.SliceData(b)] = true
		return b
	}
	s.releaseStale()
	b := s.alloc(n)
	s.made++
	s.allocated += 2 * int64(n)
	s.used[unsafe.SliceData(b)] = true
	s.held += 2 * int64(n)
	return b
}

// Put implements model.HostBuffers.
func (s *stateBufs) Put(b []uint16) {
	if len(b) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idle[len(b)] = append(s.idle[len(b)], b)
	s.used[unsafe.SliceData(b)] = true
}

// alloc makes a buffer of n values: pinned when the backend can, else from the heap. Under mu.
func (s *stateBufs) alloc(n int) []uint16 {
	if s.mem != nil {
		if raw, err := s.mem.AllocHost(2 * n); err == nil {
			b := unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(raw))), n)
			s.raw[unsafe.SliceData(b)] = raw
			return b
		}
	}
	return make([]uint16, n)
}

// releaseStale frees the idle buffers no use touched since the wave began. Under mu.
func (s *stateBufs) releaseStale() {
	for n, l := range s.idle {
		keep := l[:0]
		for _, b := range l {
			if s.used[unsafe.SliceData(b)] {
				keep = append(keep, b)
				continue
			}
			s.free(b)
		}
		if len(keep) == 0 {
			delete(s.idle, n)
		} else {
			s.idle[n] = keep
		}
	}
}

// free releases one buffer. Under mu.
func (s *stateBufs) free(b []uint16) {
	p := unsafe.SliceData(b)
	if raw, ok := s.raw[p]; ok {
		_ = s.mem.FreeHost(raw) // a backend that fails to free host memory frees it when it closes
		delete(s.raw, p)
	}
	s.held -= 2 * int64(len(b))
}

// bytes is the host memory the buffers hold.
func (s *stateBufs) bytes() int64 {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// close releases every idle buffer (the engine's Close; none is in use then).
func (s *stateBufs) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, l := range s.idle {
		for _, b := range l {
			s.free(b)
		}
		delete(s.idle, n)
	}
}

// pinStateBufs allocates the host buffers a wave of plan p over sequences lens takes (PinHostBuffers),
// as model.Pass asks for them, and returns the bytes allocated now: in BF16 precision, for every slice
// with its state in host memory its running sum and up to MaxBlocks AttnRes blocks (its rows x hidden
// each), and expert-major the stash of the wave's expert inputs and shared outputs (one of each, a layer's
// passing to the next). A wave in several reads is left to allocate its own.
func (e *Engine) pinStateBufs(p WavePlan, lens []int) int64 {
	if e.Model.Ops.Precision() != ops.BF16 || p.Waves != 1 || (!p.HostState && (!p.ExpertMajor || p.StashOnDevice)) {
		return 0
	}
	d := e.Model.Dims
	var sizes []int
	if p.HostState {
		l := ops.Layout{Starts: []int{0}}
		for _, n := range lens {
			l.Starts = append(l.Starts, l.Starts[len(l.Starts)-1]+n)
		}
		bounds := ops.SliceBounds(ops.CutSlices(l, p.SliceTokens))
		for j := p.DeviceSlices; j+1 < len(bounds); j++ {
			for range 1 + e.Plan.MaxBlocks() {
				sizes = append(sizes, (bounds[j+1]-bounds[j])*d.Hidden)
			}
		}
	}
	if p.ExpertMajor && !p.StashOnDevice {
		sizes = append(sizes, p.Tokens*d.Latent, p.Tokens*d.Hidden)
	}
	// what the idle buffers hold already, by size
	s := e.state
	s.mu.Lock()
	have := map[int]int{}
	for n, l := range s.idle {
		have[n] = len(l)
	}
	s.mu.Unlock()
	var got [][]uint16
	var bytes int64
	for _, n := range sizes {
		if have[n] > 0 {
			have[n]--
			continue
		}
		got = append(got, s.Get(n))
		bytes += 2 * int64(n)
	}
	for _, b := range got {
		s.Put(b)
	}
	return bytes
}
