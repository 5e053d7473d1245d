package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// kdaInputs are KDA's seven inputs for one layout, on the device, with their host values.
type kdaInputs struct {
	heads, d int
	host     [7][]float32 // q, k, v, graw (rows x heads*d), braw (rows x heads), aLog (1 x heads), dtBias (1 x heads*d)
	dev      [7]ops.Tensor
}

// newKDAInputs makes random inputs for rows x heads heads of width d.
func newKDAInputs(t *testing.T, b *Backend, rng *rand.Rand, rows, heads, d int) *kdaInputs {
	t.Helper()
	in := &kdaInputs{heads: heads, d: d}
	ch := heads * d
	shapes := [7][2]int{{rows, ch}, {rows, ch}, {rows, ch}, {rows, ch}, {rows, heads}, {1, heads}, {1, ch}}
	scales := [7]float64{1, 1, 1, 1, 1.5, 0.5, 0.5}
	for i, sh := range shapes {
		v := make([]float32, sh[0]*sh[1])
		for j := range v {
			v[j] = float32(scales[i] * rng.NormFloat64())
		}
		in.host[i] = v
		x, err := b.FromHost(sh[0], sh[1], v)
		if err != nil {
			t.Fatal(err)
		}
		in.dev[i] = x
	}
	return in
}

// rowsOf returns the inputs of rows [r0, r1) as new device tensors (the per-row ones sliced, the
// weights shared).
func (in *kdaInputs) rowsOf(t *testing.T, b *Backend, r0, r1 int) [7]ops.Tensor {
	t.Helper()
	out := in.dev
	rows := len(in.host[4]) / in.heads
	for i := range 5 {
		cols := len(in.host[i]) / rows
		x, err := b.FromHost(r1-r0, cols, in.host[i][r0*cols:r1*cols])
		if err != nil {
			t.Fatal(err)
		}
		out[i] = x
	}
	return out
}

func (in *kdaInputs) free(b *Backend) {
	for _, x := range in.dev {
		b.Free(x)
	}
}

// kdaWith runs the KDA op with kda.cu version v.
func kdaWith(b *Backend, v int, x [7]ops.Tensor, heads int, l ops.Layout) ([]float32, error) {
	saved := b.kdaVer
	b.kdaVer = v
	defer func() { b.kdaVer = saved }()
	y, err := b.KDA(x[0], x[1], x[2], x[3], x[4], x[5], x[6], heads, -5, l)
	if err != nil {
		return nil, err
	}
	defer b.Free(y)
	return b.ToHost(y)
}

// firstDiff returns the index of the first value whose bits differ, or -1.
func firstDiff(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// kdaTailLayout is the KDA tests' layout: sequences of 1, 63, 64, 65 and 129 rows, every tail of the
// kernels' row chunks, in one wave.
func kdaTailLayout() ops.Layout {
	starts := []int{0}
	for _, n := range []int{1, 63, 64, 65, 129} {
		starts = append(starts, starts[len(starts)-1]+n)
	}
	return ops.Layout{Starts: starts}
}

// TestKDAVersionsEqual: kda.cu version 3 (k_kda_prep3, k_kda3_rD) gives version 2's bits, for the prep's
// four outputs and the op's output, over sequences with tails (1, 63, 64, 65, 129 rows in one layout),
// head widths 32, 64, 128 (version 3's recurrence) and 48 (version 1's recurrence after prep3), one and
// three heads, both precisions; and every sequence's output is the same alone as inside the wave.
func TestKDAVersionsEqual(t *testing.T) {
	l := kdaTailLayout()
	rows := l.Tokens()
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		b := testBackend(t, Options{Precision: prec})
		for _, d := range []int{32, 64, 128, 48} {
			for _, heads := range []int{1, 3} {
				name := fmt.Sprintf("%v/d%d/heads%d", prec, d, heads)
				rng := rand.New(rand.NewPCG(uint64(d), uint64(heads)))
				in := newKDAInputs(t, b, rng, rows, heads, d)
				checkKDAPrep(t, b, name, in, rows)
				y2, err := kdaWith(b, 2, in.dev, heads, l)
				if err != nil {
					t.Fatalf("%s: version 2: %v", name, err)
				}
				y3, err := kdaWith(b, 3, in.dev, heads, l)
				if err != nil {
					t.Fatalf("%s: version 3: %v", name, err)
				}
				if i := firstDiff(y2, y3); i >= 0 {
					t.Errorf("%s: output row %d col %d: version 2 %g, version 3 %g", name, i/(heads*d), i%(heads*d), y2[i], y3[i])
				}
				checkKDAAlone(t, b, name, in, l, 3, y3)
				in.free(b)
				t.Logf("%s: %d outputs equal in versions 2 and 3; each sequence equal alone", name, len(y3))
			}
		}
	}
}

// checkKDAPrep compares the four outputs of k_kda_prep and k_kda_prep3 bit for bit.
func checkKDAPrep(t *testing.T, b *Backend, name string, in *kdaInputs, rows int) {
	t.Helper()
	heads, d := in.heads, in.d
	n := rows * heads * d
	sizes := []int{n, n, n, rows * heads}
	var got [2][4][]float32
	err := b.run("prep", func(c *opCtx) error {
		ts := make([]*Tensor, 7)
		for i, x := range in.dev {
			ts[i] = x.(*Tensor)
		}
		ptrs, err := c.f32All(ts)
		if err != nil {
			return err
		}
		for vi, version := range []int{2, 3} {
			var bufs [4]uint64
			for i, sz := range sizes {
				if bufs[i], err = c.temp(4 * sz); err != nil {
					return err
				}
			}
			if err := c.kdaPrep(version, bufs[0], bufs[1], bufs[2], bufs[3], ptrs, rows, heads, d, -5, float32(1/math.Sqrt(float64(d)))); err != nil {
				return err
			}
			for i, sz := range sizes {
				got[vi][i] = make([]float32, sz)
				if err := download(b, got[vi][i], bufs[i]); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: prep: %v", name, err)
	}
	for i, what := range []string{"qn", "kn", "dec", "beta"} {
		if j := firstDiff(got[0][i], got[1][i]); j >= 0 {
			t.Errorf("%s: prep %s value %d: version 2 %g, version 3 %g", name, what, j, got[0][i][j], got[1][i][j])
		}
	}
}
