package model

import (
	"fmt"
	"strings"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// The last phase of an expert-major layer, folded into the next sweep over the wave (Pass.FoldMajor).
//
// Where the state lives in host memory, every sweep brings each slice's running sum to the device and
// takes it back. An expert-major layer sweeps twice (moe_major.go: phase 1, then phase 3 after the expert
// chunks), so its running sums cross twice a layer where a sliced layer's cross once; phase 3 alone does
// little else (a norm and a projection a slice), so its copies, not its compute, set its time (run 145:
// pooled with the state in host memory, a kda+moe layer took 1.52-1.56 s against 1.44 a call a slice).
// Folded, phase 3 runs for slice j as the next sweep over the wave loads slice j (the next layer's, a
// hidden-state capture's or a lens readout's), before that sweep's own work: the same ops on the same rows
// in the same order for each slice, so the same bits, with the running sums crossing once a layer (runs
// 148-149: pooled and folded, 66-115 ms a MoE layer faster than a call a slice).
//
// The price: the layer's expert sums and shared outputs stay on the device into the next layer's sweep
// (within what the plan counts for the stash: the next layer's stash grows as this one's shrinks), and
// so do its routed_expert_norm and routed_expert_up_proj weights (tailWeights; the plan counts them).

// majorTail is an expert-major layer whose last phase waits for the next sweep.
type majorTail struct {
	l     *majorLayer
	moe   *MoEWeights
	layer *LayerWeights
	next  int // the next slice to finish
	pool  int // the pool of slice next
}

// finish runs the layer's last phase on slice j's state st (slices in order, each once): the slice's
// expert sums rounded, normed and projected back, added with its shared experts' output to the running
// sum. It frees each pool's accumulator once its last slice is taken.
func (t *majorTail) finish(f *Pass, bounds []int, j int, st *State) error {
	b := f.Model.Ops
	if j != t.next {
		return fmt.Errorf("slice %d's turn before slice %d's", j, t.next)
	}
	l := t.l
	for l.pools[t.pool].hi <= j {
		t.pool++
	}
	p := &l.pools[t.pool]
	acc, err := p.sliceAcc(b, bounds, j)
	if err != nil {
		return fmt.Errorf("expert sum of slice %d: %w", j, err)
	}
	if j == p.hi-1 { // the pool's last slice: its accumulator's rows are all taken
		if acc != p.acc {
			b.Free(p.acc)
		}
		p.acc = nil
	}
	t.next++
	shared, err := l.shared.take(b, bounds[j], bounds[j+1])
	if err != nil {
		b.Free(acc)
		return fmt.Errorf("shared experts' output of slice %d: %w", j, err)
	}
	up, err := t.moe.after(f, acc)
	b.Free(acc)
	if err != nil {
		b.Free(shared)
		return err
	}
	return f.accumulateSum(st, up, shared)
}

// foldTail ends layer w's run with its last phase pending (Pass.FoldMajor) where it can: the layer's
// stash on the device (a stash in host memory would need a second buffer beside the next layer's) and a
// later layer to fold into (the readout would take the running sums back for nothing).
func (f *Pass) foldTail(w *LayerWeights, l *majorLayer) bool {
	return f.FoldMajor && l.shared.keeps() && w.Layer.Index < len(f.Model.Plan.Layers)-1
}

// finishTail runs the pending last phase on slice j of w (loaded as st) when one is pending; it reports
// whether it changed the state. After the last slice the layer's rows are freed.
func (f *Pass) finishTail(w *Wave, j int, st *State) (bool, error) {
	t := f.tail
	if t == nil {
		return false, nil
	}
	if err := t.finish(f, w.Bounds, j, st); err != nil {
		f.dropTail()
		return false, fmt.Errorf("layer %d's routed experts, folded into the next sweep: %w", t.layer.Layer.Index, err)
	}
	if t.next == w.Slices() {
		f.dropTail()
	}
	return true, nil
}

// dropTail frees the pending last phase's rows, done or not.
func (f *Pass) dropTail() {
	if f.tail != nil {
		f.tail.l.free(f)
		f.tail = nil
	}
}

// Pending is the layer whose last phase waits for the next sweep over the wave (Pass.FoldMajor), nil when
// none does: its routed_expert_norm and routed_expert_up_proj must stay on the device until then.
func (f *Pass) Pending() *LayerWeights {
	if f.tail == nil {
		return nil
	}
	return f.tail.layer
}

// tailWeights are the weights of layer w that its folded last phase reads (routed_expert_norm and
// routed_expert_up_proj); none for a layer without an MoE FFN.
func tailWeights(w *LayerWeights) []ops.Tensor {
	moe, ok := w.FFN.(*MoEWeights)
	if !ok {
		return nil
	}
	return []ops.Tensor{moe.Norm, moe.UpLatent}
}

// ReleaseLayer frees layer w's weights on the device when the wave is done with them: all of them, or,
// while its last phase is pending (Pending), all but the two that phase reads (routed_expert_norm and
// routed_expert_up_proj). It reports whether it kept those; FreeLayer frees them once the phase has run.
func (f *Pass) ReleaseLayer(w *LayerWeights) (kept bool) {
	if w == nil || f.Pending() != w {
		f.Model.FreeLayer(w)
		return false
	}
	keep := tailWeights(w)
	var rest []ops.Tensor
	for _, t := range w.all {
		held := false
		for _, k := range keep {
			held = held || t == k
		}
		if !held {
			f.Model.Ops.Free(t)
			continue
		}
		rest = append(rest, t)
	}
	w.all = rest
	return true
}

// TailBytes is the checkpoint bytes of layer i's routed_expert_norm and routed_expert_up_proj (0 for a
// layer without an MoE FFN): what a folded last phase keeps on the device into the next layer.
func (p *Plan) TailBytes(i int) int64 {
	if p.Layers[i].FFN != MoE {
		return 0
	}
	var n int64
	for _, s := range p.LayerTensors(i) {
		if strings.HasSuffix(s.Name, "block_sparse_moe.routed_expert_norm.weight") ||
			strings.HasSuffix(s.Name, "block_sparse_moe.routed_expert_up_proj.weight") {
			n += s.Bytes()
		}
	}
	return n
}
