package model

import "github.com/potato-k3/potato-k3/replay/ops"

// Host buffers. The per-token state of slices kept in host memory and an expert-major layer's stash
// cross the bus every layer (wave.go, moe_pool.go). From ordinary memory every copy goes through the
// backend's staging buffer while the host waits: 9-21 GB/s for a slice's state on the H200 (run 40), with
// the device idle meanwhile. From the backend's page-locked memory (ops.HostMemory) the copy engine reads
// and writes the buffer itself at the full rate, and with ops.QueuedBF16Transfer the copies are queued in
// order with the ops, the host not waiting in them (run 42: 21.5 s for the 24 GB sequence that took 26.9
// s with staged copies). Pinning costs about a second per 3
// GB, so the engine keeps such buffers from wave to wave (HostBuffers); a pass reuses the ones it gave
// back (a slice's running sum replaces the last, a layer's stash the previous layer's).

// HostBuffers hands a pass the host memory of its bfloat16 state and stashes. Only the backend's copies
// read and write the buffers' values, never the host, so a buffer in page-locked memory may move by
// queued copies (ops.QueuedBF16Transfer).
type HostBuffers interface {
	// Get returns a buffer of n values (contents undefined).
	Get(n int) []uint16
	// Put gives back a buffer Get returned: the pass no longer uses it, and the backend's queued copies
	// of it are done (the pass waited for them).
	Put(b []uint16)
}

// hostBufs are a pass's buffers: taken from its HostBuffers (or the Go heap without one), and those given
// back kept for the pass's own reuse until Close.
type hostBufs struct {
	src   HostBuffers
	spare [][]uint16
}

// get returns a buffer of n values: a spare one of that size, else a new one (from the heap for a nil h).
func (h *hostBufs) get(n int) []uint16 {
	if h == nil {
		return make([]uint16, n)
	}
	for i, bf := range h.spare {
		if len(bf) == n {
			h.spare[i] = h.spare[len(h.spare)-1]
			h.spare = h.spare[:len(h.spare)-1]
			return bf
		}
	}
	if h.src != nil {
		return h.src.Get(n)
	}
	return make([]uint16, n)
}

// put keeps bf for reuse (nil: nothing).
func (h *hostBufs) put(bf []uint16) {
	if h != nil && bf != nil {
		h.spare = append(h.spare, bf)
	}
}

// Close ends the pass's use of host buffers: it waits for the backend's queued copies, then hands every
// buffer it holds back to the pass's HostBuffers. Call it after the wave's Free; the pass is done then.
func (f *Pass) Close() error {
	f.dropTail() // a folded layer's rows, where no sweep came to finish them (a failed wave)
	var err error
	if q, ok := f.Model.Ops.(ops.QueuedBF16Transfer); ok && f.Model.Ops.Precision() == ops.BF16 {
		err = q.Sync()
	}
	if f.host.src != nil {
		for _, bf := range f.host.spare {
			f.host.src.Put(bf)
		}
	}
	f.host.spare = nil
	return err
}

// toHostBF16 copies t's bfloat16 bits into dst, queued when the backend can (ops.QueuedBF16Transfer).
func toHostBF16(m ops.BF16Transfer, t ops.Tensor, dst []uint16) error {
	if q, ok := m.(ops.QueuedBF16Transfer); ok {
		return q.ToHostBF16Queued(t, dst)
	}
	return m.ToHostBF16(t, dst)
}

// fromHostBF16 makes a tensor of bfloat16 bits src, queued when the backend can.
func fromHostBF16(m ops.BF16Transfer, rows, cols int, src []uint16) (ops.Tensor, error) {
	if q, ok := m.(ops.QueuedBF16Transfer); ok {
		return q.FromHostBF16Queued(rows, cols, src)
	}
	return m.FromHostBF16(rows, cols, src)
}
