package model

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// fusedKDA is a CPU backend that also implements ops.KDAConv by its contract's unfused sequence, counting
// the calls.
type fusedKDA struct {
	ops.Backend
	calls int
}

func (f *fusedKDA) KDAConv(q, k, v, qConv, kConv, vConv, graw, braw, aLog, dtBias ops.Tensor, heads int, lower float32, l ops.Layout) (ops.Tensor, error) {
	f.calls++
	var cs [3]ops.Tensor
	for i, p := range [3][2]ops.Tensor{{q, qConv}, {k, kConv}, {v, vConv}} {
		c, err := f.ShortConvSiLU(p[0], p[1], l)
		if err != nil {
			return nil, err
		}
		defer f.Free(c)
		cs[i] = c
	}
	return f.KDA(cs[0], cs[1], cs[2], graw, braw, aLog, dtBias, heads, lower, l)
}

// TestKDAForwardFused: KDAWeights.Forward takes the backend's KDAConv when it has one (once a call), with
// the unfused path's bits, over two sequences; the CPU backend (which has none) keeps the unfused path.
func TestKDAForwardFused(t *testing.T) {
	const rows, hidden, heads, d, taps = 7, 16, 2, 8, 4
	ch := heads * d
	c := cpu.New(cpu.Options{Precision: ops.BF16})
	if _, ok := ops.Backend(c).(ops.KDAConv); ok {
		t.Fatal("the CPU backend implements ops.KDAConv: this test no longer checks the unfused path")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	vals := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = bf16.Round(float32(scale * rng.NormFloat64()))
		}
		return v
	}
	bfw := func(r, cols int, scale float64) ops.Tensor {
		raw := make([]byte, 2*r*cols)
		bf16.Encode(raw, vals(r*cols, scale))
		w, err := c.Upload(ops.WeightBF16, r, cols, raw)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	f32w := func(r, cols int, scale float64) ops.Tensor {
		raw := make([]byte, 4*r*cols)
		for i, x := range vals(r*cols, scale) {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
		}
		w, err := c.Upload(ops.WeightF32, r, cols, raw)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	w := &KDAWeights{
		Q: bfw(ch, hidden, 0.3), K: bfw(ch, hidden, 0.3), V: bfw(ch, hidden, 0.3), G: bfw(ch, hidden, 0.3),
		QConv: f32w(ch, taps, 0.5), KConv: f32w(ch, taps, 0.5), VConv: f32w(ch, taps, 0.5),
		FA: bfw(d, hidden, 0.3), FB: bfw(ch, d, 0.3), B: bfw(heads, hidden, 0.3),
		ALog: f32w(1, d, 0.5), DtBias: f32w(1, ch, 0.5), ONorm: f32w(1, d, 1), O: bfw(hidden, ch, 0.2),
	}
	x, err := c.FromHost(rows, hidden, vals(rows*hidden, 1))
	if err != nil {
		t.Fatal(err)
	}
	plan := &Plan{Config: TextConfig{LinearAttn: LinearAttnConfig{GateLowerBound: -5}}}
	layout := ops.Layout{Starts: []int{0, 3, rows}}
	var got [2][]float32
	f := &fusedKDA{Backend: c}
	for i, b := range []ops.Backend{c, f} {
		m := &Model{Plan: plan, Dims: Dims{KDAHeads: heads}, Ops: b, eps: 1e-5}
		y, err := w.Forward(&Pass{Model: m, Layout: layout}, x)
		if err != nil {
			t.Fatal(err)
		}
		if got[i], err = c.ToHost(y); err != nil {
			t.Fatal(err)
		}
	}
	if f.calls != 1 {
		t.Errorf("KDAConv called %d times, want 1", f.calls)
	}
	for i := range got[0] {
		if math.Float32bits(got[0][i]) != math.Float32bits(got[1][i]) {
			t.Fatalf("value %d: fused %g, unfused %g", i, got[1][i], got[0][i])
		}
	}
}
