package replay

import (
	"context"
	"reflect"
	"testing"

	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// foldCounting is the counting backend that also counts the weights it holds (in checkpoint bytes, as the
// plan does) and the hidden-width rows it copies to the host as bfloat16: the running sums and banked
// blocks of slices whose state lives in host memory. It counts uploads as accountingBackend does
// (memory_test.go), which cannot serve here: it embeds an ops.Backend, so the engine would not see the
// counting backend's ops.Slicer, RowJoiner and BF16Transfer through it, and the plan would not slice.
type foldCounting struct {
	*counting
	weights   liveBytes
	hidden    int
	downloads int
}

func (c *foldCounting) Upload(dt ops.DType, rows, cols int, raw []byte) (ops.Tensor, error) {
	t, err := c.counting.Upload(dt, rows, cols, raw)
	if err == nil {
		c.weights.add(t, int64(len(raw)))
	}
	return t, err
}

func (c *foldCounting) UploadExpert(id, latent, ffn int, w1p, w1s, w3p, w3s, w2p, w2s []byte) (ops.Expert, error) {
	x, err := c.counting.UploadExpert(id, latent, ffn, w1p, w1s, w3p, w3s, w2p, w2s)
	if err == nil {
		c.weights.add(x, int64(len(w1p)+len(w1s)+len(w3p)+len(w3s)+len(w2p)+len(w2s)))
	}
	return x, err
}

func (c *foldCounting) Free(x any) {
	c.weights.drop(x)
	c.counting.Free(x)
}

func (c *foldCounting) ToHostBF16(x ops.Tensor, dst []uint16) error {
	if x.Cols() == c.hidden {
		c.mu.Lock()
		c.downloads++
		c.mu.Unlock()
	}
	return c.counting.ToHostBF16(x, dst)
}

// TestFoldMajor: pooled with the state in host memory, each MoE layer but the last
// runs its last phase in the next sweep (WavePlan.FoldMajor). The results are the unsliced wave's bits,
// with hidden states and lens readouts taken right after folded layers; the running sums go back to host
// memory once a folded layer and slice fewer than with the same plan unfolded; the activations and
// carries stay within the plan's device peak, the weights (a folded layer's norm and up projection kept
// into the next) within its WeightBytes; and nothing stays uploaded after the wave.
func TestFoldMajor(t *testing.T) {
	lens := []int{300, 41, 700, 5, 1000}
	seqs := randomSequences(9, 3328, lens...)
	plain := Options{TopK: 3}
	captures := Options{TopK: 3, Lens: []int{2, 4}, Hidden: []int{1, 3}, Router: true, AttnRes: true}
	probe := openTiny(t, ops.BF16, EngineOptions{})
	act, state, _ := probe.tokenBytes()
	open := func(budget int64, noFold bool) (*Engine, *foldCounting) {
		c := &foldCounting{counting: newCounting(ops.BF16), hidden: probe.Model.Dims.Hidden}
		c.scratch = probe.Model.ExpertScratchBytes
		e := openPreset(t, "tiny", 1, c, EngineOptions{SliceTokens: 300, ExpertChunk: 3, PrefetchExperts: -1,
			DeviceMemory: budget})
		e.noFold = noFold
		return e, c
	}
	budget, ok := pooledHostBudget(lens, func(b int64) *Engine { e, _ := open(b, false); return e },
		quarterStateBudget(probe, act+state, 2046))
	if !ok {
		t.Fatal("no device budget plans the wave pooled with the state in host memory")
	}
	moeBefore := 0 // MoE layers with a later layer: the ones that fold
	for _, l := range probe.Plan.Layers[:len(probe.Plan.Layers)-1] {
		if l.FFN == model.MoE {
			moeBefore++
		}
	}
	if moeBefore == 0 {
		t.Fatal("the tiny preset has no MoE layer before its last: nothing folds")
	}
	for _, o := range []Options{plain, captures} {
		want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), Request{Sequences: seqs, Options: o})
		downloads := map[bool]int{}
		for _, noFold := range []bool{false, true} {
			e, c := open(budget, noFold)
			globals := c.weights.held
			c.reset()
			c.weights.mu.Lock()
			c.weights.peak = globals
			c.weights.mu.Unlock()
			got, _, err := e.Run(context.Background(), []Request{{Sequences: seqs, Options: o}})
			if err != nil {
				t.Fatal(err)
			}
			p := e.plan
			if !p.Pooled || !p.HostState || !p.FoldMajor || p.Waves != 1 {
				t.Fatalf("plan %s: want one read, pooled, the state in host memory, folded", p)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("folded %v, captures %v: results differ from the unsliced wave (%s)", !noFold, o.Lens != nil, p)
			}
			if limit := p.DevicePeak - p.WeightBytes; c.peak > limit {
				t.Errorf("folded %v: activations and carries peaked at %d bytes, over the plan's %d (%s)", !noFold, c.peak, limit, p)
			}
			if c.weights.peak > p.WeightBytes {
				t.Errorf("folded %v: weights peaked at %d bytes, over the plan's %d", !noFold, c.weights.peak, p.WeightBytes)
			}
			if c.weights.held != globals || c.held != 0 {
				t.Errorf("folded %v: after the wave %d bytes of weights beyond the globals and %d of activations still held (a leak)",
					!noFold, c.weights.held-globals, c.held)
			}
			downloads[noFold] = c.downloads
			t.Logf("folded %v: %s; %d hidden-width downloads; weights peaked at %d bytes of %d planned", !noFold, p, c.downloads, c.weights.peak, p.WeightBytes)
		}
		if o.Lens != nil {
			continue // a capture after a folded layer takes its running sums back itself
		}
		e, _ := open(budget, false)
		p, err := e.PlanWave(lens)
		if err != nil {
			t.Fatal(err)
		}
		hostSlices := p.Slices - p.DeviceSlices
		if got, want := downloads[true]-downloads[false], moeBefore*hostSlices; got != want {
			t.Errorf("unfolded %d hidden-width downloads, folded %d: %d more, want %d (%d folded layers x %d slices in host memory)",
				downloads[true], downloads[false], got, want, moeBefore, hostSlices)
		}
	}
}
