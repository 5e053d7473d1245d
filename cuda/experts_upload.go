package cuda

import (
	"errors"
	"runtime"
	"sync"
	"unsafe"

	"github.com/potato-k3/potato-k3/replay/ops"
)

var _ ops.ExpertBatchUploader = (*Backend)(nil)

// UploadExperts implements ops.ExpertBatchUploader. When every part of every expert lies in stable host
// memory (stable.go) the experts not checked before are checked on all cores at once, and one trip to
// the CUDA thread queues every copy, each expert's followed by its event: no host wait at all. Otherwise
// it is UploadExpert for each expert in turn.
func (b *Backend) UploadExperts(latent, ffn int, parts []ops.ExpertParts) ([]ops.Expert, error) {
	const op = "UploadExperts"
	all := make([][6][]byte, len(parts))
	stable := true
	for i, p := range parts {
		all[i] = [6][]byte{p.W1Packed, p.W1Scale, p.W3Packed, p.W3Scale, p.W2Packed, p.W2Scale}
		stable = stable && p.ID >= 0 && b.stableHost(all[i][:]...)
	}
	if !stable || latent <= 0 || ffn <= 0 || latent%2 != 0 || ffn%2 != 0 {
		return b.uploadEach(latent, ffn, parts)
	}
	if err := b.checkExperts(op, latent, ffn, parts, all); err != nil {
		return nil, err
	}
	es, err := b.uploadStable(op, latent, ffn, parts, all)
	if err != nil {
		return nil, err
	}
	out := make([]ops.Expert, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out, nil
}

// uploadEach is UploadExperts by UploadExpert, freeing what it made on an error.
func (b *Backend) uploadEach(latent, ffn int, parts []ops.ExpertParts) ([]ops.Expert, error) {
	out := make([]ops.Expert, 0, len(parts))
	for _, p := range parts {
		e, err := b.UploadExpert(p.ID, latent, ffn, p.W1Packed, p.W1Scale, p.W3Packed, p.W3Scale, p.W2Packed, p.W2Scale)
		if err != nil {
			for _, done := range out {
				b.Free(done)
			}
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// checkExperts runs UploadExpert's checks on the experts of a stable batch that were never checked, on
// all cores, and returns the error of the first failing expert in batch order (what uploading them one
// by one reports).
func (b *Backend) checkExperts(op string, latent, ffn int, parts []ops.ExpertParts, all [][6][]byte) error {
	errs := make([]error, len(parts))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(parts)) {
		wg.Go(func() {
			for i := range next {
				errs[i] = checkExpert(op, parts[i].ID, latent, ffn, all[i])
				if errs[i] == nil {
					b.hosts.markChecked(all[i])
				}
			}
		})
	}
	for i := range parts {
		if !b.hosts.checkedBefore(all[i]) {
			next <- i
		}
	}
	close(next)
	wg.Wait()
	return firstErr(errs)
}

// firstErr is the first non-nil error of errs, or nil.
func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// sharedBlock is one device allocation holding the bytes of several experts of a batch, copied in one
// piece from the stable host buffer that held them all; each expert is a view into it. It is freed,
// and its event reused, when the last of its experts is freed.
type sharedBlock struct {
	ptr  uint64
	ev   uintptr
	refs int
}

// releaseBlock drops one expert's reference to blk and frees it with the last. On the CUDA thread.
func (b *Backend) releaseBlock(blk *sharedBlock) error {
	if blk.refs--; blk.refs > 0 {
		return nil
	}
	b.evs.events.Put(blk.ev)
	p := blk.ptr
	blk.ptr, blk.ev = 0, 0
	return b.dv.Free(p)
}

// stableGroup is the experts of a batch whose parts all lie in one stable buffer, with the span of that
// buffer that covers them.
type stableGroup struct {
	idx    []int   // into the batch
	lo, hi uintptr // the span's first and past-the-last byte
	first  []byte  // the part that starts at lo
	host   []byte  // the span
}

// uploadStable queues the copies of a batch from stable memory: per host buffer, when every part there
// starts at a multiple of 16 bytes from the span that covers them (the kernels read 16 bytes at a time;
// true for a checkpoint whose MXFP4 tensors are all multiples of 16 bytes long), one copy of the span
// into one device block and one event; else each expert as UploadExpert lays it out. On an error nothing
// of the batch stays allocated.
func (b *Backend) uploadStable(op string, latent, ffn int, parts []ops.ExpertParts, all [][6][]byte) ([]*Expert, error) {
	groups, loose := groupByBuffer(&b.hosts, all)
	es := make([]*Expert, len(parts))
	for i, p := range parts {
		es[i] = &Expert{b: b, id: p.ID, latent: latent, ffn: ffn}
	}
	err := b.run(op, func(c *opCtx) error {
		var blocks []*sharedBlock
		undo := func(err error) error { // free what was made, after the copies already queued
			errs := []error{err, b.dv.SyncCopy()}
			for _, blk := range blocks {
				errs = append(errs, b.dv.Free(blk.ptr))
				if blk.ev != 0 { // 0: the block's copy failed before its event was recorded
					b.evs.events.Put(blk.ev)
				}
			}
			for _, e := range es {
				if e.block == nil && e.ptr != 0 {
					errs = append(errs, b.dv.Free(e.ptr))
					if e.ev != 0 {
						b.evs.events.Put(e.ev)
					}
				}
				e.ptr, e.ev, e.block, e.freed = 0, 0, nil, true
			}
			return errors.Join(errs...)
		}
		for _, g := range groups {
			p, err := b.dv.MallocCopy(int(g.hi - g.lo))
			if err != nil {
				return undo(err)
			}
			blk := &sharedBlock{ptr: p, refs: len(g.idx)}
			blocks = append(blocks, blk)
			if err := b.dv.CopyAsync(p, g.host); err != nil {
				return undo(err)
			}
			view := &Expert{}
			if err := b.recordUpload(view); err != nil {
				return undo(err)
			}
			blk.ev = view.ev
			for _, i := range g.idx {
				e := es[i]
				base := addr(all[i][0])
				for _, part := range all[i] {
					base = min(base, addr(part))
				}
				e.ptr = p + uint64(base-g.lo)
				for j, part := range all[i] {
					e.off[j] = int(addr(part) - base)
				}
				e.block, e.ev, e.seq = blk, view.ev, view.seq
			}
		}
		for _, i := range loose {
			e := es[i]
			size, padded := e.layout(all[i])
			p, err := b.dv.MallocCopy(size)
			if err != nil {
				return undo(err)
			}
			e.ptr = p
			if err := b.fillExpert(p, size, padded, true, all[i], e.off); err != nil {
				return undo(err)
			}
			if err := b.recordUpload(e); err != nil {
				return undo(err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return es, nil
}

// addr is the address of a slice's first byte.
func addr(p []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(p))) }

// groupByBuffer sorts the experts of a batch (all parts in stable buffers) into groups that share a host
// buffer and can be copied as one span, and the loose rest.
func groupByBuffer(h *hostAllocs, all [][6][]byte) ([]stableGroup, []int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	byBuf := map[uintptr]*stableGroup{}
	var order []uintptr
	var loose []int
	for i, ps := range all {
		buf, ok := h.bufferOf(ps)
		if !ok {
			loose = append(loose, i)
			continue
		}
		g := byBuf[buf]
		if g == nil {
			g = &stableGroup{lo: ^uintptr(0)}
			byBuf[buf] = g
			order = append(order, buf)
		}
		g.idx = append(g.idx, i)
		for _, part := range ps {
			if addr(part) < g.lo {
				g.lo, g.first = addr(part), part
			}
			g.hi = max(g.hi, addr(part)+uintptr(len(part)))
		}
	}
	var groups []stableGroup
	for _, buf := range order {
		g := byBuf[buf]
		aligned := true
		for _, i := range g.idx {
			for _, part := range all[i] {
				aligned = aligned && (addr(part)-g.lo)%16 == 0
			}
		}
		if !aligned {
			loose = append(loose, g.idx...)
			continue
		}
		// The span runs on from its first part inside the same host buffer.
		g.host = unsafe.Slice(unsafe.SliceData(g.first), g.hi-g.lo)
		groups = append(groups, *g)
	}
	return groups, loose
}
