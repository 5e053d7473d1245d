package cuda

// MemoryPeak is the device memory the backend took at its most since ResetMemoryPeak, from the driver's
// own counts: what a plan's device peak is checked against. nvidia-smi's figure is not that count: the
// backend's pool keeps the blocks it freed (cuda/device: its release threshold is never reached), so on an
// 80 GB card the measured peak was the whole card (runs 134 and 141) where the plan counted 74.7 GB.
type MemoryPeak struct {
	// PoolUsed is the most the stream-ordered pool had allocated at once: tensors, weights, scratch.
	PoolUsed int64
	// Outside is what the process holds outside the pool, read when MemoryPeak is called: kept scratch
	// (cuda/device/kept.go, which only grows), cuBLASLt's and the side streams' workspaces, the modules
	// and the context. It counts what the device's other processes hold too, if any.
	Outside int64
	// PoolReserved is the most the pool held from the device: PoolUsed and the freed blocks it kept.
	PoolReserved int64
}

// Allocated is the peak of what the backend had allocated: PoolUsed + Outside.
func (m MemoryPeak) Allocated() int64 { return m.PoolUsed + m.Outside }

// MemoryPeak returns the peaks since ResetMemoryPeak (or the backend's start). Without a stream-ordered
// pool (a device without one) every allocation is outside it, and Outside is what is held now.
func (b *Backend) MemoryPeak() (MemoryPeak, error) {
	free, total, err := b.MemInfo()
	if err != nil {
		return MemoryPeak{}, err
	}
	var m MemoryPeak
	err = b.ex.Do(func() error {
		var err error
		if m.PoolUsed, m.PoolReserved, err = b.dv.PoolHigh(); err != nil {
			return err
		}
		m.PoolUsed = max(m.PoolUsed, b.prof.memSeen) // the op profile restarts the mark at every op
		reserved, err := b.dv.PoolReserved()
		m.Outside = max(total-free-reserved, 0)
		return err
	})
	return m, err
}

// ResetMemoryPeak starts MemoryPeak's high-water marks again from what is held now.
func (b *Backend) ResetMemoryPeak() error {
	return b.ex.Do(func() error {
		b.prof.memSeen = 0
		return b.dv.ResetPoolHigh()
	})
}
