package replay

import (
	"fmt"

	"github.com/potato-k3/potato-k3/internal/numtext"
)

// The read-ahead's host buffers (readahead.go): equal slots kept by the engine across layers and waves.

// aheadSlab is the engine's slots: equal arenas from the pool, kept across layers and waves so that a
// layer's read-ahead does not pin its memory again (pinning ran at about 3 GB/s on the H200: 1.2 s for
// 3.5 GB, cuda/records/JOURNAL.md; on the CUDA backend the pinning runs on its CUDA thread). A wave
// takes what its budget allows and keeps, for the next, as many as it used at once; a wave with a smaller
// budget or another slot size, and Close, release the rest.
type aheadSlab struct {
	size int      // bytes of every slot
	idle [][]byte // slots not in use
	n    int      // slots allocated, idle or in use
}

// fit keeps at most max idle slots of size bytes, releasing the others through pool.
func (s *aheadSlab) fit(pool *hostPool, size, max int) {
	if s.size != size {
		max = 0
	}
	for len(s.idle) > max {
		_ = pool.release(s.idle[len(s.idle)-1]) // a backend that fails to free host memory frees it when it closes
		s.idle = s.idle[:len(s.idle)-1]
		s.n--
	}
	s.size = size
}

// fitSlab sizes the engine's slots for a wave whose read-ahead may take budget bytes (0: none): as many
// slots as the budget holds, idle ones beyond them and ones of another size released. It returns that
// count.
func (e *Engine) fitSlab(budget int64) int {
	size := e.aheadSlotBytes()
	slots := 0
	if budget > 0 && size > 0 {
		slots = int(budget / size)
	}
	e.slab.fit(e.pool, int(size), slots)
	return slots
}

// PinHostBuffers allocates now the host buffers a wave of sequences of the given lengths will use, so
// that the first such wave does not allocate them between its layers: the experts' read-ahead's slots
// (readahead.go) and the buffers of the state its slices keep in host memory and of its expert-major
// stashes (statebufs.go). On the CUDA backend they are page-locked, and pinning runs on the device's own
// thread, holding back every op (run 38: 10 s for 15.8 GB on the H200, inside the first layer). Later
// waves reuse the buffers either way; the bench calls this before its timed waves. It returns the bytes
// allocated now (0 when the buffers exist already, or when such a wave needs none). Not for use while a
// wave runs.
func (e *Engine) PinHostBuffers(lens []int) (int64, error) {
	if e.opts.PlanOnly {
		return 0, ErrPlanOnly
	}
	if e.group != nil { // several devices: the feed reads every expert once for all, no read-ahead
		return 0, nil
	}
	p, err := e.planWave(lens)
	if err != nil {
		return 0, err
	}
	slots, size := e.fitSlab(p.ExpertReadAhead), e.aheadSlotBytes() // as the wave's start will
	n := e.pinStateBufs(p, lens)
	for e.slab.n < slots {
		a, err := e.pool.get(int(size))
		if err != nil {
			return n, fmt.Errorf("host buffers for the experts' read-ahead (%d of %d slots of %s): %w", e.slab.n, slots, numtext.Bytes(size), err)
		}
		e.slab.idle = append(e.slab.idle, a[:size:size])
		e.slab.n++
		n += size
	}
	return n, nil
}
