package replay

import "fmt"

// PinHostBuffers allocates now the host buffers that the experts' read-ahead (readahead.go) of a wave of
// sequences of the given lengths will use, so that the first such wave does not allocate them between its
// layers: on the CUDA backend they are page-locked, and pinning runs on the device's own thread, holding
// back every op (run 38: 10 s for 15.8 GB on the H200, inside the first layer). Later waves reuse the
// buffers either way; the bench calls this before its timed waves. It returns the bytes allocated now (0
// when the buffers exist already, or when such a wave reads nothing ahead). Not for use while a wave runs.
func (e *Engine) PinHostBuffers(lens []int) (int64, error) {
	if e.group != nil { // several devices: the feed reads every expert once for all, no read-ahead
		return 0, nil
	}
	p, err := e.planWave(lens)
	if err != nil {
		return 0, err
	}
	size := e.aheadSlotBytes()
	if p.ExpertReadAhead <= 0 || size <= 0 {
		return 0, nil
	}
	slots := int(p.ExpertReadAhead / size)
	e.slab.fit(e.pool, int(size), max(slots, e.slab.n))
	var n int64
	for e.slab.n < slots {
		a, err := e.pool.get(int(size))
		if err != nil {
			return n, fmt.Errorf("host buffers for the experts' read-ahead (%d of %d slots of %s): %w", e.slab.n, slots, gb(size), err)
		}
		e.slab.idle = append(e.slab.idle, a[:size:size])
		e.slab.n++
		n += size
	}
	return n, nil
}
