package replay

import (
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// mixNormCPU is the CPU backend with ops.MixNormer by the interface's contract (AttnResMix, then RMSNorm
// of its output), counting the fused calls, those that asked for the weights, and the plain mixes the
// model still makes (none should come: every mix is normed at once).
type mixNormCPU struct {
	*cpu.Backend
	fused, withWeights, plain atomic.Int64
}

func (b *mixNormCPU) AttnResMixNorm(vs []ops.Tensor, wg, w ops.Tensor, eps float32, weights bool) (ops.Tensor, []float32, error) {
	b.fused.Add(1)
	h, p, err := b.Backend.AttnResMix(vs, wg)
	if err != nil {
		return nil, nil, err
	}
	defer b.Backend.Free(h)
	out, err := b.Backend.RMSNorm(h, w, eps)
	if err != nil {
		return nil, nil, err
	}
	if !weights {
		return out, nil, nil
	}
	b.withWeights.Add(1)
	return out, p, nil
}

func (b *mixNormCPU) AttnResMix(vs []ops.Tensor, wg ops.Tensor) (ops.Tensor, []float32, error) {
	b.plain.Add(1)
	return b.Backend.AttnResMix(vs, wg)
}

// TestMixNorm: on a backend with ops.MixNormer the model hands it every AttnRes mix with its norm (the
// attention's, the FFN's and the readout's, logit lens included), asks for the weights only when the
// request keeps them, and gets the plain backend's bits, whole and sliced.
func TestMixNorm(t *testing.T) {
	seqs := randomSequences(7, 3328, 90, 7, 130, 33)
	for _, attnRes := range []bool{false, true} {
		req := Request{Sequences: seqs, Options: Options{TopK: 3, Lens: []int{2, 4}, Router: true, AttnRes: attnRes}}
		want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), req)
		for _, eo := range []EngineOptions{{}, {SliceTokens: 40}} {
			b := &mixNormCPU{Backend: cpu.New(cpu.Options{Precision: ops.BF16})}
			got := runOne(t, openPreset(t, "tiny", 1, b, eo), req)
			if b.fused.Load() == 0 || b.plain.Load() != 0 || (b.withWeights.Load() > 0) != attnRes {
				t.Fatalf("AttnRes weights %v, slices of %d: %d fused mixes (%d with weights), %d plain ones: want some fused, weights only when kept, no plain ones",
					attnRes, eo.SliceTokens, b.fused.Load(), b.withWeights.Load(), b.plain.Load())
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("AttnRes weights %v, slices of %d: results with the fused mix and norm differ from the plain backend's", attnRes, eo.SliceTokens)
			}
			t.Logf("AttnRes weights %v, slices of %d: %d fused mixes (%d with weights), the same results", attnRes, eo.SliceTokens, b.fused.Load(), b.withWeights.Load())
		}
	}
}
