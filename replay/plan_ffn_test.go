package replay

import (
	"context"
	"reflect"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// boundedFFN is the counting backend with a SiTUFFN whose calls hold a fixed scratch beyond x and their
// output (ops.SiTUFFNScratch), as the CUDA backend's row blocks do: it computes the FFN with the CPU
// backend's unfused ops, uncounted, and counts its output and, while the call runs, the scratch it
// declares.
type boundedFFN struct {
	*counting
	scratch int64
}

func (f *boundedFFN) SiTUFFN(x, gate, up, down ops.Tensor, beta, linBeta float32) (ops.Tensor, error) {
	const key = "SiTUFFN scratch"
	f.add(key, f.scratch)
	defer f.drop(key)
	cpu := f.counting.Backend
	g, err := cpu.MatMul(x, gate)
	if err != nil {
		return nil, err
	}
	defer cpu.Free(g)
	u, err := cpu.MatMul(x, up)
	if err != nil {
		return nil, err
	}
	defer cpu.Free(u)
	h, err := cpu.SiTUGLU(g, u, beta, linBeta)
	if err != nil {
		return nil, err
	}
	defer cpu.Free(h)
	return f.t(cpu.MatMul(h, down))
}

func (f *boundedFFN) SiTUFFNScratchBytes(hidden, ffn int) (int64, bool) { return f.scratch, true }

// TestPlanBoundedFFN (the small preset, whose largest layer by a row's values is its dense FFN): on a
// backend whose SiTUFFN holds a fixed scratch (ops.SiTUFFNScratch), the plan
// counts that scratch once a slice instead of the FFNs' gate, up and SiTU outputs a row
// (model.Plan.SliceValuesPerTokenFFN), so a device budget holds larger slices; the wave stays within the
// plan's device peak and gives the unsliced bits.
func TestPlanBoundedFFN(t *testing.T) {
	seqs := randomSequences(9, 3328, sliceSeqLens...)
	opts := Options{TopK: 3, Lens: []int{4}, Router: true}
	want := runOne(t, openPreset(t, "small", 1, newCounting(ops.BF16), EngineOptions{}), Request{Sequences: seqs, Options: opts})
	plain := openPreset(t, "small", 1, newCounting(ops.BF16), EngineOptions{})
	d := plain.Model.Dims
	const scratch = 64 << 10
	f := &boundedFFN{counting: newCounting(ops.BF16), scratch: scratch}
	probe := openPreset(t, "small", 1, f, EngineOptions{})
	if got, ok := probe.ffnScratch(); got != scratch || !ok {
		t.Fatalf("ffnScratch %d, %v: want %d, true", got, ok, scratch)
	}
	if got, ok := plain.ffnScratch(); got != 0 || ok {
		t.Fatalf("the plain CPU backend: ffnScratch %d, %v: want 0, false", got, ok)
	}
	actPlain, _, _ := plain.tokenBytes()
	actBounded, _, _ := probe.tokenBytes()
	wantValues := probe.Plan.SliceValuesPerTokenFFN(true)
	if all := probe.Plan.SliceValuesPerToken(); wantValues >= all {
		t.Fatalf("the tiny preset's largest layer is not an FFN's (%d values a row bounded, %d not): nothing to test", wantValues, all)
	}
	if gap := actPlain - actBounded; gap != (probe.Plan.SliceValuesPerToken()-wantValues)*probe.Model.ActivationBytes() {
		t.Errorf("a row's activations %d bytes bounded, %d not: want the FFNs' %d widths less (dense %d, shared %d)",
			actBounded, actPlain, probe.Plan.SliceValuesPerToken()-wantValues, d.DenseFFN, d.SharedWidth)
	}
	// one budget for both: a slice of 60 planned with the FFNs' intermediates, and a quarter of the state
	total := 0
	for _, n := range sliceSeqLens {
		total += n
	}
	_, state, _ := plain.tokenBytes()
	budget := plain.weightPeak(true) + plain.carryBytes(150, true) + 60*actPlain + int64(total)*state/4
	var slice [2]int
	for i, b := range []ops.Backend{newCounting(ops.BF16), f} {
		e := openPreset(t, "small", 1, b, EngineOptions{DeviceMemory: budget, NoExpertPooling: true})
		c, _ := b.(*counting)
		if c == nil {
			c = f.counting
		}
		c.reset()
		got, _, err := e.Run(context.Background(), []Request{{Sequences: seqs, Options: opts}})
		if err != nil {
			t.Fatal(err)
		}
		p := e.plan
		slice[i] = p.SliceTokens
		if limit := p.DevicePeak - p.WeightBytes; c.peak > limit {
			t.Errorf("device peak of activations and carries %d bytes, over the plan's %d (%s)", c.peak, limit, p)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("results differ from the unsliced wave (%s)", p)
		}
		t.Logf("%s; counted peak %.2f MB of %.2f planned", p, float64(c.peak)/1e6, float64(p.DevicePeak-p.WeightBytes)/1e6)
	}
	if slice[1] <= slice[0] {
		t.Errorf("slices of %d with the FFN's scratch bounded, %d without: want larger", slice[1], slice[0])
	}
}
