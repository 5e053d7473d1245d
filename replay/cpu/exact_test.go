package cpu_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestMatMulOrder: MatMul equals the loop its doc comment states (one float32 accumulator per element,
// ascending k, products rounded before the add) bit for bit, for every combination of row and column
// tails of the 4x2 and 1x4 tiles and across a k panel boundary.
func TestMatMulOrder(t *testing.T) {
	for _, p := range []ops.Precision{ops.BF16, ops.FP32} {
		b := cpu.New(cpu.Options{Precision: p, Threads: 2})
		g := newGen(t, b, 1)
		for _, k := range []int{1, 7, 1030} {
			for n := 1; n <= 9; n++ {
				for _, m := range []int{1, 2, 3, 4, 5, 6, 7, 9, 67} {
					xv := g.floats(n*k, 1)
					if p == ops.BF16 {
						bf16.RoundSlice(xv) // what FromHost stores
					}
					x, err := b.FromHost(n, k, xv)
					if err != nil {
						t.Fatal(err)
					}
					wv := g.floats(m*k, 0.1)
					got := g.host(b.MatMul(x, g.f32(m, k, wv)))
					want := make([]float32, n*m)
					for i := range n {
						for j := range m {
							var s float32
							for q := range k {
								s += float32(xv[i*k+q] * wv[j*k+q])
							}
							if p == ops.BF16 {
								s = bf16.Round(s)
							}
							want[i*m+j] = s
						}
					}
					sameBits(t, fmt.Sprintf("%v MatMul %dx%d by %dx%d", p, n, k, m, k), got, want)
				}
			}
		}
	}
}

// TestExpertEqualsOps: ExpertsAccumulate equals MatMul(z, W1), MatMul(z, W3), SiTUGLU, MatMul(., W2) and
// acc += weight * h in float32, bit for bit, with the expert matrices uploaded as F32 weights decoded by
// checkpoint.DecodeMXFP4.
func TestExpertEqualsOps(t *testing.T) {
	const rows, latent, ffn = 37, 64, 96
	for _, p := range []ops.Precision{ops.BF16, ops.FP32} {
		b := cpu.New(cpu.Options{Precision: p})
		g := newGen(t, b, 2)
		eb := g.expertBytes(latent, ffn)
		x := g.expert(9, latent, ffn, eb)
		mat := func(packed, scales []byte, r, c int) ops.Tensor {
			v := make([]float32, r*c)
			if err := checkpoint.DecodeMXFP4(v, packed, scales, r, c); err != nil {
				t.Fatal(err)
			}
			return g.f32(r, c, v)
		}
		w1, w3, w2 := mat(eb[0], eb[1], ffn, latent), mat(eb[2], eb[3], ffn, latent), mat(eb[4], eb[5], latent, ffn)
		z := g.act(rows, latent, 1)
		rt := ops.Routing{K: 1, IDs: make([]int32, rows), Weights: g.floats(rows, 1)}
		for i := range rt.IDs {
			rt.IDs[i] = 9
		}
		acc, err := b.FromHost(rows, latent, g.floats(rows*latent, 0.1))
		if err != nil {
			t.Fatal(err)
		}
		want := host(t, b, acc, nil)
		if err := b.ExpertsAccumulate(acc, z, rt, []ops.Expert{x}, 4, 25); err != nil {
			t.Fatal(err)
		}
		gate, err := b.MatMul(z, w1)
		if err != nil {
			t.Fatal(err)
		}
		up, err := b.MatMul(z, w3)
		if err != nil {
			t.Fatal(err)
		}
		act, err := b.SiTUGLU(gate, up, 4, 25)
		if err != nil {
			t.Fatal(err)
		}
		h := g.host(b.MatMul(act, w2))
		for r := range rows {
			for d := range latent {
				want[r*latent+d] += float32(rt.Weights[r] * h[r*latent+d])
			}
		}
		sameBits(t, fmt.Sprintf("%v expert vs ops", p), host(t, b, acc, nil), want)
	}
}

// TestFreed: every use of a freed tensor or expert is an ErrFreed error.
func TestFreed(t *testing.T) {
	b := cpu.New(cpu.Options{})
	g := newGen(t, b, 3)
	x, w := g.act(2, 64, 1), g.weight(3, 64, 1)
	e := g.expert(0, 64, 32, g.expertBytes(64, 32))
	b.Free(x)
	b.Free(e)
	b.Free(x) // twice is harmless
	if _, err := b.MatMul(x, w); err == nil || !errors.Is(err, cpu.ErrFreed) {
		t.Errorf("MatMul of a freed tensor: %v, want ErrFreed", err)
	}
	acc, _ := b.Zeros(2, 64)
	z := g.act(2, 64, 1)
	rt := ops.Routing{K: 1, IDs: []int32{0, 0}, Weights: []float32{1, 1}}
	if err := b.ExpertsAccumulate(acc, z, rt, []ops.Expert{e}, 4, 25); !errors.Is(err, cpu.ErrFreed) {
		t.Errorf("ExpertsAccumulate with a freed expert: %v, want ErrFreed", err)
	}
	if _, err := b.MatMul(z, w); err != nil {
		t.Errorf("live tensors still work: %v", err)
	}
}
