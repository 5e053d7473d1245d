package model

import (
	"errors"
	"fmt"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// The next slice's state on its way in while this slice computes. A slice whose state lives in host
// memory used to upload it when its turn came, queued in order with the layer's work: the copy ran
// between two slices' ops, with the device's SMs idle (run 131, an H100 with the state of 262,144 tokens
// in host memory: 149 ms a MoE layer in the state's uploads, 9%). On a backend that splits a transfer in
// two (ops.PrefetchBF16Transfer), eachLoaded starts slice j+1's upload before it queues slice j's work
// and takes it when slice j+1's turn comes: the copy runs beside slice j. A layer's last sweep starts
// slice 0's whole state in its last slice, for the next layer's sweep or the readout (run 134: the first
// slice's upload, queued, was 34.5 ms of such an H100 MoE layer); slice 0 went back to host memory at the
// sweep's start, and its download comes first on the backend (ops.QueuedBF16Transfer). The plan counts
// the bytes on their way (replay/plan.go: a slice's state in bfloat16 beside the running slice). The
// bits are the upload's: Take gives FromHostBF16's tensor.

// pendingState is a slice's state started on its way to the backend.
type pendingState struct {
	blocks     []ops.Prefetched
	p          ops.Prefetched // nil when the slice holds no running sum
	withBlocks bool           // the blocks were started too (each, not eachSum)
}

// prefetch starts slice j's state on its way to the backend, its blocks too when blocks is set, where
// the backend splits transfers and the slice's state is in host memory as bfloat16 bits; elsewhere it
// does nothing and loadState uploads as before.
func (w *Wave) prefetch(b ops.Backend, j int, blocks bool) error {
	if j >= w.Slices() || w.host == nil || w.host[j] == nil || w.dev[j] != nil || w.pre[j] != nil {
		return nil
	}
	pf, ok := b.(ops.PrefetchBF16Transfer)
	if !ok || b.Precision() != ops.BF16 {
		return nil
	}
	h := w.host[j]
	var rows []hostRows
	if blocks {
		rows = append(rows, h.blocks...)
	}
	if h.p.rows > 0 {
		rows = append(rows, h.p)
	}
	for _, r := range rows {
		if r.bf == nil { // float32 values: uploaded as before
			return nil
		}
	}
	ps := &pendingState{withBlocks: blocks}
	for i, r := range rows {
		x, err := pf.PrefetchBF16(r.rows, r.cols, r.bf)
		if err != nil {
			return errors.Join(fmt.Errorf("state of slice %d: %w", j, err), ps.drop())
		}
		if i == len(rows)-1 && h.p.rows > 0 {
			ps.p = x
		} else {
			ps.blocks = append(ps.blocks, x)
		}
	}
	w.pre[j] = ps
	return nil
}

// take returns the state ps started, on the backend; on an error nothing of it is left.
func (ps *pendingState) take(b ops.Backend) (*State, error) {
	st := &State{}
	for i, x := range ps.blocks {
		t, err := x.Take()
		if err != nil {
			ps.blocks = ps.blocks[i+1:]
			st.Free(b)
			return nil, errors.Join(err, ps.drop())
		}
		st.Blocks = append(st.Blocks, t)
	}
	ps.blocks = nil
	if ps.p != nil {
		t, err := ps.p.Take()
		ps.p = nil
		if err != nil {
			st.Free(b)
			return nil, err
		}
		st.P = t
	}
	return st, nil
}

// drop gives up what ps has not handed over.
func (ps *pendingState) drop() error {
	var errs []error
	for _, x := range ps.blocks {
		errs = append(errs, x.Drop())
	}
	if ps.p != nil {
		errs = append(errs, ps.p.Drop())
	}
	ps.blocks, ps.p = nil, nil
	return errors.Join(errs...)
}

// dropPending gives up every slice's state on its way (a layer that failed, a wave freed).
func (w *Wave) dropPending() error {
	var errs []error
	for j, ps := range w.pre {
		if ps != nil {
			errs = append(errs, ps.drop())
			w.pre[j] = nil
		}
	}
	return errors.Join(errs...)
}
