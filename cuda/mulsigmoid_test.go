package cuda_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/potato-k3/potato-k3/cuda"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestMulSigmoidBits: MulSigmoid and GatedRMSNorm's gate against the CPU backend's double-precision
// statement, bit for bit, over 25 million values: gates of activation size, gates anywhere in (-90, 90),
// zeros, products near the subnormals, NaN and infinities. (Written for a single-precision fast path with
// a double-precision fallback, which held these bits and was slower: cuda/records/JOURNAL.md, run 68.)
func TestMulSigmoidBits(t *testing.T) {
	p := newPair(t, cuda.Options{Precision: ops.BF16})
	const rows, cols = 2048, 12288
	xv, gv := make([]float32, rows*cols), make([]float32, rows*cols)
	for i := range xv {
		xv[i] = float32(p.rng.NormFloat64())
		gv[i] = float32(4 * p.rng.NormFloat64())
		switch p.rng.IntN(64) {
		case 0:
			gv[i] = float32(180*p.rng.Float64() - 90)
		case 1:
			xv[i] = float32(1e-37 * p.rng.NormFloat64())
		case 2:
			xv[i] = 0
		case 3:
			xv[i] = []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 3e38}[p.rng.IntN(4)]
		case 4:
			gv[i] = []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}[p.rng.IntN(3)]
		}
	}
	up := func(v []float32) both {
		g, err := p.g.FromHost(rows, cols, v)
		if err != nil {
			t.Fatal(err)
		}
		c, err := p.c.FromHost(rows, cols, v)
		if err != nil {
			t.Fatal(err)
		}
		return both{g, c}
	}
	x, g := up(xv), up(gv)
	gy, ge := p.g.MulSigmoid(x.g, g.g)
	cy, ce := p.c.MulSigmoid(x.c, g.c)
	got, want := p.host(both{gy, cy}, ge, ce)
	sameOrNaN(t, "MulSigmoid, 2048 x 12288", got, want)

	// GatedRMSNorm in groups of 128 (KDA's output norm) = MulSigmoid(RMSNorm(x), gate): the CUDA norm's
	// output gated on the CPU, bit for bit
	w := p.weight(ops.WeightF32, 1, 128, 1)
	heads, err := p.g.FromHost(rows*cols/128, 128, xv)
	if err != nil {
		t.Fatal(err)
	}
	gate, err := p.g.FromHost(rows*cols/128, 128, gv)
	if err != nil {
		t.Fatal(err)
	}
	gated, err := p.g.GatedRMSNorm(heads, w.g, gate, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	normed, err := p.g.RMSNorm(heads, w.g, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	nv, err := p.g.ToHost(normed)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := p.c.FromHost(rows, cols, nv)
	if err != nil {
		t.Fatal(err)
	}
	cg, cerr := p.c.MulSigmoid(nc, g.c)
	gg, err := p.g.ToHost(gated)
	if err != nil {
		t.Fatal(err)
	}
	cgv, err := p.c.ToHost(cg)
	if err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
	sameOrNaN(t, fmt.Sprintf("GatedRMSNorm (%d groups of 128)", rows*cols/128), gg, cgv)
}

// sameOrNaN fails unless got and want (the CPU backend's) have equal bits wherever want is a number, and
// got is NaN wherever want is (a NaN's sign and payload are not part of the contract).
func sameOrNaN(t *testing.T, what string, got, want []float32) {
	t.Helper()
	bad, nan := 0, 0
	for i := range want {
		switch w := want[i]; {
		case w != w:
			nan++
			if g := got[i]; g == g {
				bad++
			}
		case math.Float32bits(got[i]) != math.Float32bits(w):
			if bad < 5 {
				t.Errorf("%s: value %d: %g (%#x), the CPU backend %g (%#x)", what, i, got[i], math.Float32bits(got[i]), w, math.Float32bits(w))
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values differ from the CPU backend's bits", what, bad, len(want))
		return
	}
	t.Logf("%s: all %d values equal the CPU backend's bits (%d NaN)", what, len(want), nan)
}
