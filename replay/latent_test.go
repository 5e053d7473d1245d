package replay

import (
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// latentCPU is the CPU backend with ops.LatentKeys by the interface's contract (kv = latent times kv_b,
// then MLA or MLASlice over it), counting the calls that take the latent and the MatMuls that the model
// still makes with a kv_b-shaped weight (none should come: the backend expands the keys itself).
type latentCPU struct {
	*cpu.Backend
	heads, nope, vdim int
	latentCalls       atomic.Int64
	kvbMatMuls        atomic.Int64
}

func (b *latentCPU) MLAFromLatent(heads, nope, shared, vdim, kvLora int) bool {
	b.heads, b.nope, b.vdim = heads, nope, vdim
	return true
}

func (b *latentCPU) MLALatent(q, latent, ks, kvb ops.Tensor, heads, nope, shared, vdim int, l ops.Layout) (ops.Tensor, error) {
	b.latentCalls.Add(1)
	kv, err := b.Backend.MatMul(latent, kvb)
	if err != nil {
		return nil, err
	}
	defer b.Backend.Free(kv)
	return b.Backend.MLA(q, kv, ks, heads, nope, shared, vdim, l)
}

func (b *latentCPU) MLASlice(q, kv, ks, latent, kvb ops.Tensor, heads, nope, shared, vdim int, l ops.SliceLayout, in ops.Carry) (ops.Tensor, ops.Carry, error) {
	if kv == nil {
		b.latentCalls.Add(1)
		var err error
		if kv, err = b.Backend.MatMul(latent, kvb); err != nil {
			return nil, nil, err
		}
		defer b.Backend.Free(kv)
	}
	return b.Backend.MLASlice(q, kv, ks, latent, kvb, heads, nope, shared, vdim, l, in)
}

func (b *latentCPU) MatMul(x, w ops.Tensor) (ops.Tensor, error) {
	if b.heads > 0 && w.Rows() == b.heads*(b.nope+b.vdim) {
		b.kvbMatMuls.Add(1)
	}
	return b.Backend.MatMul(x, w)
}

// TestLatentKeys: on a backend with ops.LatentKeys the model skips kv_b's MatMul and hands MLA the latent
// (MLALatent unsliced, MLASlice with kv nil in slices that cut sequences), with the bits of the plain
// backend, whole and sliced.
func TestLatentKeys(t *testing.T) {
	seqs := randomSequences(5, 3328, 90, 7, 130, 33)
	req := Request{Sequences: seqs, Options: Options{TopK: 3, Lens: []int{4}, Router: true}}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), req)
	for _, eo := range []EngineOptions{{}, {SliceTokens: 40}} {
		b := &latentCPU{Backend: cpu.New(cpu.Options{Precision: ops.BF16})}
		got := runOne(t, openPreset(t, "tiny", 1, b, eo), req)
		if b.latentCalls.Load() == 0 || b.kvbMatMuls.Load() != 0 {
			t.Fatalf("slices of %d: %d MLA calls with the latent, %d MatMuls by kv_b: want some and none", eo.SliceTokens, b.latentCalls.Load(), b.kvbMatMuls.Load())
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("slices of %d: results with the keys from the latent differ from the plain backend's", eo.SliceTokens)
		}
		t.Logf("slices of %d: %d MLA calls took the latent, the same results", eo.SliceTokens, b.latentCalls.Load())
	}
}
