package cuda

import "errors"

// The way back on the state stream. A slice whose state lives in host memory goes back there after its
// layer (replay/model/wave.go put); queued on the compute stream the copy ran between two slices' work
// with the SMs idle: 72.5 ms of an H100's 1,497 ms MoE layer at 262,144 tokens (run 134), once the way
// in ran beside compute (state_prefetch.go).
//
// queueDownload narrows the tensor (or copies its bfloat16 form) into a temporary buffer on the compute
// stream, makes the state stream wait for that point, copies the buffer out there and frees it there,
// after the copy. The caller's tensor may go at once: the copy reads the buffer, not it. The next
// slice's work is queued on the compute stream while the copy runs.
//
// The order of the host buffers: on the state stream a download precedes every prefetch queued after
// it (the next layer's upload of the same buffer, PrefetchBF16); uploads on the compute stream
// (FromHostBF16Queued: a layer's first slice, an expert-major layer's stash) wait on the host for the
// state stream first (queuedWait), as Sync does, so the host reads a buffer only after its copy.
//
// What the device holds: each queued transfer waits on the host for the state stream (queuedWait), so
// at most the downloads queued since the last transfer, one slice's, are on their way: its running sum
// and a block banked by the layer, and in an expert-major layer the stash's rows. The plan counts them
// (replay/plan_bytes.go downloadBytes); run 41 is why the host must not run further ahead.

// queuedWait waits on the host for the work queued on the compute stream and on the state stream, before
// a queued transfer: see transfer.go for why the compute stream, above for the state stream.
func (b *Backend) queuedWait() error {
	return errors.Join(b.dv.Sync(), b.dv.SyncState())
}

// queueDownload queues the copy of t's bfloat16 bits into pinned dst (2 x t.n() bytes) on the state
// stream, by way of a temporary buffer.
func (b *Backend) queueDownload(c *opCtx, t *Tensor, dst []byte) error {
	src, p, err := c.bf16Bits(t)
	if err != nil {
		return err
	}
	if p == 0 { // t's own bits: copied, so that t may go at once
		if p, err = b.dv.Malloc(len(dst)); err != nil {
			return err
		}
		if err := c.copyDtoD(p, src, uint64(len(dst))); err != nil {
			return errors.Join(err, b.dv.Free(p))
		}
	}
	// the buffer's bits, written on the compute stream, before the copy
	s, err := b.dv.StateStreamAfter(c.stream())
	if err != nil {
		return errors.Join(err, b.dv.Free(p))
	}
	if err := b.dv.ToHostOn(s, dst, p); err != nil {
		// the copy may have been queued: it ends before the buffer goes back
		return errors.Join(err, b.dv.SyncState(), b.dv.Free(p))
	}
	return b.dv.FreeOn(s, p)
}
