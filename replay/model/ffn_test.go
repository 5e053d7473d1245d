package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// fusedFFN is a CPU backend that also implements ops.SiTUFFN by its contract's unfused sequence, counting
// the calls.
type fusedFFN struct {
	ops.Backend
	calls int
}

func (f *fusedFFN) SiTUFFN(x, gate, up, down ops.Tensor, beta, linBeta float32) (ops.Tensor, error) {
	f.calls++
	g, err := f.MatMul(x, gate)
	if err != nil {
		return nil, err
	}
	defer f.Free(g)
	u, err := f.MatMul(x, up)
	if err != nil {
		return nil, err
	}
	defer f.Free(u)
	h, err := f.SiTUGLU(g, u, beta, linBeta)
	if err != nil {
		return nil, err
	}
	defer f.Free(h)
	return f.MatMul(h, down)
}

// TestDenseForwardFused: DenseWeights.Forward takes the backend's SiTUFFN when it has one (once a call),
// with the unfused path's bits, and the CPU backend (which has none) keeps the unfused path.
func TestDenseForwardFused(t *testing.T) {
	const rows, hidden, width = 5, 16, 24
	c := cpu.New(cpu.Options{Precision: ops.BF16})
	if _, ok := ops.Backend(c).(ops.SiTUFFN); ok {
		t.Fatal("the CPU backend implements ops.SiTUFFN: this test no longer checks the unfused path")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	vals := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = bf16.Round(float32(scale * rng.NormFloat64()))
		}
		return v
	}
	weight := func(r, cols int, scale float64) ops.Tensor {
		raw := make([]byte, 2*r*cols)
		bf16.Encode(raw, vals(r*cols, scale))
		w, err := c.Upload(ops.WeightBF16, r, cols, raw)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	w := &DenseWeights{Gate: weight(width, hidden, 1), Up: weight(width, hidden, 4), Down: weight(hidden, width, 0.2)}
	x, err := c.FromHost(rows, hidden, vals(rows*hidden, 1))
	if err != nil {
		t.Fatal(err)
	}
	plan := &Plan{Config: TextConfig{SiTUBeta: 4, SiTULinearBeta: 25}}
	var got [2][]float32
	f := &fusedFFN{Backend: c}
	for i, b := range []ops.Backend{c, f} {
		y, err := w.Forward(&Pass{Model: &Model{Plan: plan, Ops: b}}, x)
		if err != nil {
			t.Fatal(err)
		}
		if got[i], err = c.ToHost(y); err != nil {
			t.Fatal(err)
		}
	}
	if f.calls != 1 {
		t.Errorf("SiTUFFN called %d times, want 1", f.calls)
	}
	for i := range got[0] {
		if math.Float32bits(got[0][i]) != math.Float32bits(got[1][i]) {
			t.Fatalf("value %d: fused %g, unfused %g", i, got[1][i], got[0][i])
		}
	}
}
