package cuda

import (
	"errors"
	"fmt"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Transfers split in two (ops.PrefetchBF16Transfer): the engine starts the next slice's state on its
// way in from pinned host memory before it queues this slice's layer, and takes it when that slice's
// turn comes (replay/model/state_prefetch.go). The queued transfers of transfer.go run on the compute
// stream, between two slices' kernels: in run 131 (an H100 with a 262,144-token wave's state in host
// memory) 149 ms of a 1,668 ms MoE layer uploaded state with the SMs idle.
//
// PrefetchBF16 allocates the bfloat16 bits' buffer on the compute stream (stream-ordered, so memory the
// ops queued before it free serves it, as run 41 required of every allocation: transfer.go's
// queuedWait), makes the state stream wait for that point, queues the copy there and records an event
// after it. Nothing waits on the host. Take makes the compute stream wait for the event, then widens the
// bits into the float32 activation FromHostBF16 makes and frees the buffer, both queued: the ops queued
// between the two halves ran beside the copy. The device holds the 2 bytes a value in between, which
// the engine's plan counts (replay/plan_bytes.go prefetchBytes).

var _ ops.PrefetchBF16Transfer = (*Backend)(nil)

// prefetched is one transfer PrefetchBF16 started: bits p on their way (ev recorded after their copy),
// or, from memory not pinned, the tensor made at once (t).
type prefetched struct {
	b          *Backend
	rows, cols int
	p          uint64
	ev         uintptr
	t          ops.Tensor
	done       bool
}

// PrefetchBF16 implements ops.PrefetchBF16Transfer.
func (b *Backend) PrefetchBF16(rows, cols int, src []uint16) (ops.Prefetched, error) {
	const op = "PrefetchBF16"
	if err := b.checkBF16Src(op, rows, cols, src); err != nil {
		return nil, err
	}
	if len(src) == 0 || !b.pinned(bytesOf(src)) {
		t, err := b.FromHostBF16Queued(rows, cols, src)
		if err != nil {
			return nil, err
		}
		return &prefetched{b: b, rows: rows, cols: cols, t: t}, nil
	}
	x := &prefetched{b: b, rows: rows, cols: cols}
	err := b.run(op, func(c *opCtx) error {
		p, err := b.dv.Malloc(2 * len(src))
		if err != nil {
			return err
		}
		// the allocation, ordered on the compute stream, before the copy
		s, err := b.dv.StateStreamAfter(b.dv.Stream)
		if err != nil {
			return errors.Join(err, b.dv.Free(p))
		}
		if err := b.dv.CopyOn(s, p, bytesOf(src)); err != nil {
			return errors.Join(err, b.dv.Free(p))
		}
		ev, err := b.dv.SyncEvents().Record(b.drv, s)
		if err != nil { // the copy may be running: it ends before the buffer goes back
			return errors.Join(err, b.dv.SyncState(), b.dv.Free(p))
		}
		x.p, x.ev = p, ev
		return nil
	})
	if err != nil {
		return nil, err
	}
	return x, nil
}

// end marks x ended, or says that it was already.
func (x *prefetched) end(op string) error {
	if x.done {
		return fmt.Errorf("%w: %s: the transfer has ended already", ErrArgument, op)
	}
	x.done = true
	return nil
}

// join makes the compute stream wait (on the device) for x's copy and gives its event back.
func (x *prefetched) join() error {
	b := x.b
	err := b.drv.Check("cuStreamWaitEvent(state)", bind.Call(b.drv.CuStreamWaitEvent, b.dv.Stream, x.ev, 0))
	b.dv.SyncEvents().Put(x.ev) // the queued wait keeps what the event captured
	x.ev = 0
	return err
}

// Take implements ops.Prefetched: FromHostBF16's tensor, the bits widened on the compute stream after
// their copy.
func (x *prefetched) Take() (ops.Tensor, error) {
	const op = "PrefetchBF16.Take"
	if err := x.end(op); err != nil {
		return nil, err
	}
	if x.t != nil {
		return x.t, nil
	}
	b := x.b
	var out *Tensor
	err := b.run(op, func(c *opCtx) error {
		if err := x.join(); err != nil {
			return errors.Join(err, b.dv.Free(x.p))
		}
		var err error
		if out, err = c.out(x.rows, x.cols); err == nil {
			err = c.launch1D("k_widen_bf16", out.n(), out.ptr, x.p, int64(out.n()))
		}
		return errors.Join(err, b.dv.Free(x.p)) // stream-ordered: after the widening
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Drop implements ops.Prefetched: it waits on the host for the copy (src is the caller's again when it
// returns: a failed wave's host buffers may be freed next) and gives the buffer back.
func (x *prefetched) Drop() error {
	const op = "PrefetchBF16.Drop"
	if err := x.end(op); err != nil {
		return err
	}
	b := x.b
	if x.t != nil {
		b.Free(x.t)
		return nil
	}
	return b.run(op, func(c *opCtx) error {
		serr := b.drv.Check("cuEventSynchronize(state)", bind.Call(b.drv.CuEventSynchronize, x.ev))
		return errors.Join(serr, x.join(), b.dv.Free(x.p))
	})
}
