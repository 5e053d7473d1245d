package replay

import (
	"context"
	"reflect"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// boundedFFN is the counting backend with a SiTUFFN whose calls hold at most a fixed scratch beyond x
// and their output (ops.SiTUFFNScratch), as the CUDA backend's row blocks do: a call holds its rows'
// gate, up and SiTU outputs, at most scratch bytes of them. It computes the FFN with the CPU backend's
// unfused ops, uncounted, and counts its output and, while the call runs, that scratch.
type boundedFFN struct {
	*counting
	scratch int64
}

func (f *boundedFFN) SiTUFFN(x, gate, up, down ops.Tensor, beta, linBeta float32) (ops.Tensor, error) {
	const key = "SiTUFFN scratch"
	f.add(key, min(f.scratch, 3*4*int64(x.Rows())*int64(gate.Rows())))
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
// backend whose SiTUFFN holds a bounded scratch (ops.SiTUFFNScratch) the plan counts that scratch once a
// slice instead of the FFNs' gate, up and SiTU outputs a row (model.Plan.SliceValuesPerTokenFFN), where
// that plans larger slices, and otherwise counts them a row as before; either way the wave stays within
// the plan's device peak and gives the plain backend's bits (the unsliced wave's: TestSliceInvariance).
func TestPlanBoundedFFN(t *testing.T) {
	seqs := randomSequences(9, 3328, sliceSeqLens...)
	opts := Options{TopK: 3, Lens: []int{4}, Router: true}
	plain := openPreset(t, "small", 1, newCounting(ops.BF16), EngineOptions{})
	const small = 64 << 10
	probe := openPreset(t, "small", 1, &boundedFFN{counting: newCounting(ops.BF16), scratch: small}, EngineOptions{})
	if got, ok := probe.ffnScratch(); got != small || !ok {
		t.Fatalf("ffnScratch %d, %v: want %d, true", got, ok, small)
	}
	if got, ok := plain.ffnScratch(); got != 0 || ok {
		t.Fatalf("the plain CPU backend: ffnScratch %d, %v: want 0, false", got, ok)
	}
	actPlain, _, _ := plain.tokenBytesFFN(true)
	actBounded, _, _ := probe.tokenBytesFFN(true)
	if unbounded, _, _ := probe.tokenBytes(); unbounded != actPlain {
		t.Errorf("a row's activations with the FFNs' intermediates counted %d bytes, want the plain backend's %d", unbounded, actPlain)
	}
	rowValues := probe.Plan.SliceValuesPerTokenFFN(true)
	if all := probe.Plan.SliceValuesPerToken(); rowValues >= all {
		t.Fatalf("the small preset's largest layer is not an FFN's (%d values a row bounded, %d not): nothing to test", rowValues, all)
	} else if gap := actPlain - actBounded; gap != (all-rowValues)*probe.Model.ActivationBytes() {
		t.Errorf("a row's activations %d bytes bounded, %d not: want the FFNs' %d values less", actBounded, actPlain, all-rowValues)
	}
	// one budget for all: a slice of 60 planned with the FFNs' intermediates, and a quarter of the state
	total := 0
	for _, n := range sliceSeqLens {
		total += n
	}
	_, state, _ := plain.tokenBytes()
	budget := plain.weightPeak(true) + plain.carryBytes(150, true) + 60*actPlain + int64(total)*state/4
	slices := map[string]int{}
	var want [][]Result
	for _, c := range []struct {
		name    string
		scratch int64 // 0: the plain counting backend
	}{
		{"plain", 0},
		{"bounded, a small block", small},
		{"bounded, a block of more than 60 rows' intermediates", 1 << 30},
	} {
		t.Run(c.name, func(t *testing.T) {
			cb := newCounting(ops.BF16)
			var b ops.Backend = cb
			if c.scratch > 0 {
				b = &boundedFFN{counting: cb, scratch: c.scratch}
			}
			e := openPreset(t, "small", 1, b, EngineOptions{DeviceMemory: budget, NoExpertPooling: true})
			cb.reset()
			got, _, err := e.Run(context.Background(), []Request{{Sequences: seqs, Options: opts}})
			if err != nil {
				t.Fatal(err)
			}
			p := e.plan
			slices[c.name] = p.SliceTokens
			if limit := p.DevicePeak - p.WeightBytes; cb.peak > limit {
				t.Errorf("device peak of activations and carries %d bytes, over the plan's %d (%s)", cb.peak, limit, p)
			}
			if want == nil {
				want = got // the plain backend's, first
			} else if !reflect.DeepEqual(got, want) {
				t.Errorf("results differ from the plain backend's (%s)", p)
			}
			t.Logf("%s; counted peak %.2f MB of %.2f planned", p, float64(cb.peak)/1e6, float64(p.DevicePeak-p.WeightBytes)/1e6)
		})
	}
	base := slices["plain"]
	if s := slices["bounded, a small block"]; s <= base {
		t.Errorf("slices of %d with a small bounded scratch, %d without: want larger", s, base)
	}
	if s := slices["bounded, a block of more than 60 rows' intermediates"]; s != base {
		t.Errorf("slices of %d with a large bounded scratch, %d without: want the same (the FFNs counted a row)", s, base)
	}
}
