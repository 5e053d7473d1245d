package replay

import (
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// sumAddCPU is the CPU backend with ops.SumAdder by the interface's contract (Add(p, Add(a, b))),
// counting its calls.
type sumAddCPU struct {
	*cpu.Backend
	fused atomic.Int64
}

func (b *sumAddCPU) AddSum(p, a, c ops.Tensor) (ops.Tensor, error) {
	b.fused.Add(1)
	ac, err := b.Backend.Add(a, c)
	if err != nil {
		return nil, err
	}
	defer b.Backend.Free(ac)
	return b.Backend.Add(p, ac)
}

// TestAddSum: on a backend with ops.SumAdder the model ends every MoE layer with one AddSum of its two
// outputs into the running sum, whole, sliced and expert-major, with the plain backend's bits.
func TestAddSum(t *testing.T) {
	seqs := randomSequences(9, 3328, 90, 7, 130, 33)
	req := Request{Sequences: seqs, Options: Options{TopK: 3, Lens: []int{2, 4}, Router: true}}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), req)
	for _, eo := range []EngineOptions{{}, {SliceTokens: 40}, {SliceTokens: 40, ExpertMajor: true}} {
		b := &sumAddCPU{Backend: cpu.New(cpu.Options{Precision: ops.BF16})}
		e := openPreset(t, "tiny", 1, b, eo)
		moe := e.Plan.MoELayers()
		got := runOne(t, e, req)
		if moe == 0 || b.fused.Load() < int64(moe) {
			t.Fatalf("slices of %d, expert-major %v: %d AddSum calls for %d MoE layers", eo.SliceTokens, eo.ExpertMajor, b.fused.Load(), moe)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("slices of %d, expert-major %v: results with AddSum differ from the plain backend's", eo.SliceTokens, eo.ExpertMajor)
		}
		t.Logf("slices of %d, expert-major %v: %d AddSum calls (%d MoE layers), the same results", eo.SliceTokens, eo.ExpertMajor, b.fused.Load(), moe)
	}
}
