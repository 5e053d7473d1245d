package replay

import (
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// narrowCountCPU is the CPU backend with an ops.NarrowMatMuler that is MatMul (the contract allows it),
// counting its calls.
type narrowCountCPU struct {
	*cpu.Backend
	calls atomic.Int64
}

func (b *narrowCountCPU) MatMulNarrow(x, w ops.Tensor) (ops.Tensor, error) {
	b.calls.Add(1)
	return b.MatMul(x, w)
}

// TestNarrowMatMul: on a backend with ops.NarrowMatMuler the model asks for a KDA layer's q, k and v
// projections through it, three a KDA layer and slice, whole and sliced, with the plain backend's bits.
func TestNarrowMatMul(t *testing.T) {
	seqs := randomSequences(12, 3328, 90, 7, 130, 33)
	req := Request{Sequences: seqs, Options: Options{TopK: 3, Lens: []int{2, 4}}}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), req)
	for _, eo := range []EngineOptions{{}, {SliceTokens: 40}} {
		b := &narrowCountCPU{Backend: cpu.New(cpu.Options{Precision: ops.BF16})}
		e := openPreset(t, "tiny", 1, b, eo)
		kda := len(e.Plan.LayerIndices(model.KDA))
		got := runOne(t, e, req)
		slices := 1
		if eo.SliceTokens > 0 {
			slices = (260 + eo.SliceTokens - 1) / eo.SliceTokens
		}
		if n := b.calls.Load(); kda == 0 || n != int64(3*kda*slices) {
			t.Errorf("slices of %d: %d MatMulNarrow calls, want 3 for each of %d KDA layers and %d slices", eo.SliceTokens, n, kda, slices)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("slices of %d: results through MatMulNarrow differ from the plain backend's", eo.SliceTokens)
		}
	}
}
