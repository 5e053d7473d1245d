package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// kdaConvTaps makes random ch x taps convolution weights.
func kdaConvTaps(t *testing.T, b *Backend, rng *rand.Rand, ch, taps int) [3]ops.Tensor {
	t.Helper()
	var w [3]ops.Tensor
	for i := range w {
		x, err := b.FromHost(ch, taps, fastFill(rng, ch*taps, 0.5))
		if err != nil {
			t.Fatal(err)
		}
		w[i] = x
	}
	return w
}

// kdaConvHost runs KDAConv (fused true) or its contract's unfused ops on in (q, k, v raw) and returns the
// output on the host.
func kdaConvHost(t *testing.T, b *Backend, x [7]ops.Tensor, w [3]ops.Tensor, heads int, l ops.Layout, fused bool) []float32 {
	t.Helper()
	f := b.kdaConvUnfused
	if fused {
		f = b.KDAConv
	}
	y, err := f(x[0], x[1], x[2], w[0], w[1], w[2], x[3], x[4], x[5], x[6], heads, -5, l)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(y)
	out, err := b.ToHost(y)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestKDAConv: KDAConv equals its contract's unfused ops (three ShortConvSiLU, then KDA) bit for bit over
// TestKDAVersion4's layout (sequences of 1, 63, 64, 65 and 129 rows), head widths 32, 64 and 128, one
// and three heads, 4 and 3 taps: in BF16 precision on the fused path (k_kda_convprep4, KDA version 7),
// in FP32 precision on the unfused one (version 3) and, with the test knob at version 7, on the fused path
// too; and every sequence of the fused path is the same alone as inside the wave.
func TestKDAConv(t *testing.T) {
	l := kdaTailLayout()
	rows := l.Tokens()
	for _, c := range []struct {
		prec  ops.Precision
		knob  int
		fused bool
	}{{ops.BF16, 0, true}, {ops.FP32, 0, false}, {ops.FP32, 7, true}} {
		b := testBackend(t, Options{Precision: c.prec})
		b.kdaVer = c.knob
		for _, d := range []int{32, 64, 128} {
			for _, heads := range []int{1, 3} {
				for _, taps := range []int{4, 3} {
					name := fmt.Sprintf("%v/knob%d/d%d/heads%d/taps%d", c.prec, c.knob, d, heads, taps)
					rng := rand.New(rand.NewPCG(uint64(d*heads), uint64(taps)))
					in := newKDAInputs(t, b, rng, rows, heads, d)
					w := kdaConvTaps(t, b, rng, heads*d, taps)
					_, why := b.kdaConvFusable(in.dev[0], in.dev[1], in.dev[2], w[0], w[1], w[2], in.dev[3], in.dev[4], in.dev[5], in.dev[6], heads, l)
					if (why == "") != c.fused {
						t.Fatalf("%s: fused path %v (%q), want %v", name, why == "", why, c.fused)
					}
					fused := kdaConvHost(t, b, in.dev, w, heads, l, true)
					unfused := kdaConvHost(t, b, in.dev, w, heads, l, false)
					sameBitsQuiet(t, name+": KDAConv vs the unfused ops", fused, unfused, heads*d)
					for s := range l.Sequences() {
						r0, r1 := l.Starts[s], l.Starts[s+1]
						x := in.rowsOf(t, b, r0, r1)
						alone := kdaConvHost(t, b, x, w, heads, ops.Layout{Starts: []int{0, r1 - r0}}, true)
						for i := range 5 {
							b.Free(x[i])
						}
						ch := heads * d
						if i := firstDiff(alone, fused[r0*ch:r1*ch]); i >= 0 {
							t.Errorf("%s: sequence %d (rows %d..%d): alone and in the wave differ at value %d", name, s, r0, r1, i)
						}
					}
					in.free(b)
					for _, x := range w {
						b.Free(x)
					}
				}
			}
		}
	}
}

// TestKDAConvTiming times KDAConv fused and unfused (three ShortConvSiLU, then KDA) at K3's sizes (96
// heads of 128, 4 taps) for 16 x 4096 tokens in BF16 precision, and checks their bits agree. Skipped
// with -short. The fused path saves writing the convolved q and k and reading them back: 4 x 3.2 GB.
func TestKDAConvTiming(t *testing.T) {
	skipTiming(t)
	b := testBackend(t, Options{Precision: ops.BF16})
	const seqs, n, heads, d = 16, 4096, 96, 128
	starts := []int{0}
	for range seqs {
		starts = append(starts, starts[len(starts)-1]+n)
	}
	l := ops.Layout{Starts: starts}
	rng := rand.New(rand.NewPCG(41, 42))
	var x [7]ops.Tensor
	shapes := [7][2]int{{seqs * n, heads * d}, {seqs * n, heads * d}, {seqs * n, heads * d}, {seqs * n, heads * d}, {seqs * n, heads}, {1, heads}, {1, heads * d}}
	scales := [7]float64{1, 1, 1, 1, 1.5, 0.5, 0.5}
	for i, sh := range shapes {
		v, err := b.FromHost(sh[0], sh[1], fastFill(rng, sh[0]*sh[1], scales[i]))
		if err != nil {
			t.Fatal(err)
		}
		x[i] = v
	}
	w := kdaConvTaps(t, b, rng, heads*d, 4)
	var ms [2]float64
	for i, fused := range []bool{true, false} {
		f := b.kdaConvUnfused
		if fused {
			f = b.KDAConv
		}
		med := medianTime(t, b, 5, func() error {
			y, err := f(x[0], x[1], x[2], w[0], w[1], w[2], x[3], x[4], x[5], x[6], heads, -5, l)
			b.Free(y)
			return err
		})
		ms[i] = float64(med.Microseconds()) / 1e3
		t.Logf("TIMING KDAConv %d x %d tokens, %d heads of %d, %-8s %8.3f ms", seqs, n, heads, d, map[bool]string{true: "fused", false: "unfused"}[fused], ms[i])
	}
	t.Logf("TIMING KDAConv unfused - fused = %.3f ms", ms[1]-ms[0])
	tail := ops.Layout{Starts: []int{0, n}} // the first sequence alone: the same bits both ways
	one := x
	for i := range 5 {
		cols := shapes[i][1]
		v, err := b.FromHost(n, cols, fastFill(rand.New(rand.NewPCG(uint64(i), 43)), n*cols, scales[i]))
		if err != nil {
			t.Fatal(err)
		}
		one[i] = v
	}
	sameBitsQuiet(t, "KDAConv fused vs unfused, one sequence of 4096", kdaConvHost(t, b, one, w, heads, tail, true), kdaConvHost(t, b, one, w, heads, tail, false), heads*d)
	for i := range 7 {
		b.Free(x[i])
		if i < 5 {
			b.Free(one[i])
		}
	}
	for _, v := range w {
		b.Free(v)
	}
}
