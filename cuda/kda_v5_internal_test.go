package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// ulpDist is the distance of two float32 values in units in the last place (the difference of their
// bits on one ordered line), or MaxInt for a NaN.
func ulpDist(a, b float32) int {
	if a != a || b != b {
		return math.MaxInt
	}
	ord := func(x float32) int64 {
		u := int64(math.Float32bits(x))
		if u&(1<<31) != 0 {
			return -(u &^ (1 << 31))
		}
		return u
	}
	d := ord(a) - ord(b)
	if d < 0 {
		d = -d
	}
	return int(d)
}

// kdaPrepOut runs kdaPrep of version on in's rows and returns qn, kn, dec and beta.
func kdaPrepOut(t *testing.T, b *Backend, name string, in *kdaInputs, rows, version int, lower float32) [4][]float32 {
	t.Helper()
	heads, d := in.heads, in.d
	n := rows * heads * d
	sizes := []int{n, n, n, rows * heads}
	var got [4][]float32
	err := b.run("prep", func(c *opCtx) error {
		ts := make([]*Tensor, 7)
		for i, x := range in.dev {
			ts[i] = x.(*Tensor)
		}
		ptrs, err := c.f32All(ts)
		if err != nil {
			return err
		}
		var bufs [4]uint64
		for i, sz := range sizes {
			if bufs[i], err = c.temp(4 * sz); err != nil {
				return err
			}
		}
		if err := c.kdaPrep(version, bufs[0], bufs[1], bufs[2], bufs[3], ptrs, rows, heads, d, lower, float32(1/math.Sqrt(float64(d)))); err != nil {
			return err
		}
		for i, sz := range sizes {
			got[i] = make([]float32, sz)
			if err := download(b, got[i], bufs[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: prep version %d: %v", name, version, err)
	}
	return got
}

// prep4 tolerances against prep3 (double precision rounded once), in float32 ulps: beta = sigmoid_ff
// (expf's 2 ulps, an add and a reciprocal rounded: at most 4); dec = expf(y) with y = lower * gate, where
// gate carries sigmoid_ff's error (up to 4 ulps) into y and exp multiplies a relative error of y by |y| =
// |ln dec|: at most 4 + 5 |ln dec| ulps.
const (
	prep4BetaULP   = 4
	prep4DecULP    = 4
	prep4DecLogULP = 5
)

// TestKDAPrep4: k_kda_prep4 (KDA version 5's prep) gives k_kda_prep3's qn and kn bit for bit and dec and
// beta within a few float32 ulps (prep4BetaULP, prep4DecULP + prep4DecLogULP |ln dec|), over sequences
// with tails (1, 63, 64, 65, 129 rows), head widths 32, 64, 128 and 48, one and three heads, two decay
// bounds (lower -5 as K3, and -1); it logs the largest and mean ulp distances. Then the whole op in both
// precisions: version 5 against version 3 within kdaV4Tol (in BF16 precision at most 1% of the outputs
// moved, by at most one bfloat16 ulp), and each sequence's version 5 output equal alone and inside the
// wave, bit for bit.
func TestKDAPrep4(t *testing.T) {
	lens := []int{1, 63, 64, 65, 129}
	starts := []int{0}
	for _, n := range lens {
		starts = append(starts, starts[len(starts)-1]+n)
	}
	l := ops.Layout{Starts: starts}
	rows := l.Tokens()
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		b := testBackend(t, Options{Precision: prec})
		for _, d := range []int{32, 64, 128, 48} {
			for _, heads := range []int{1, 3} {
				name := fmt.Sprintf("%v/d%d/heads%d", prec, d, heads)
				rng := rand.New(rand.NewPCG(uint64(d)+7, uint64(heads)))
				in := newKDAInputs(t, b, rng, rows, heads, d)
				if prec == ops.BF16 { // the prep does not depend on the precision
					for _, lower := range []float32{-5, -1} {
						checkPrep4(t, b, fmt.Sprintf("%s/lower%g", name, lower), in, rows, lower)
					}
				}
				y3, err := kdaWith(b, 3, in.dev, heads, l)
				if err != nil {
					t.Fatalf("%s: version 3: %v", name, err)
				}
				y5, err := kdaWith(b, 5, in.dev, heads, l)
				if err != nil {
					t.Fatalf("%s: version 5: %v", name, err)
				}
				df := diffKDA(y5, y3, prec == ops.BF16)
				t.Logf("%s: version 5 against 3: %v", name, df)
				if df.maxFrac > 1 {
					i := df.worst
					t.Errorf("%s: row %d col %d: version 5 %g, version 3 %g: beyond the tolerance (%.3g |ref| + %.3g rms)",
						name, i/(heads*d), i%(heads*d), y5[i], y3[i], df.tolRel, df.tolBase)
				}
				if prec == ops.BF16 && df.differ*100 > df.n {
					t.Errorf("%s: %d of %d values differ from version 3 (at most 1%% may)", name, df.differ, df.n)
				}
				checkKDAAlone(t, b, name, in, l, 5, y5)
				in.free(b)
			}
		}
	}
}

// checkPrep4 compares prep4's outputs with prep3's under the prep4 tolerances and logs the distances.
func checkPrep4(t *testing.T, b *Backend, name string, in *kdaInputs, rows int, lower float32) {
	t.Helper()
	p3 := kdaPrepOut(t, b, name, in, rows, 4, lower)
	p4 := kdaPrepOut(t, b, name, in, rows, 5, lower)
	for i, what := range []string{"qn", "kn"} {
		if j := firstDiff(p3[i], p4[i]); j >= 0 {
			t.Errorf("%s: prep %s value %d: prep3 %g, prep4 %g", name, what, j, p3[i][j], p4[i][j])
		}
	}
	var decMax, decDiff, betaMax, betaDiff int
	var decSum, betaSum, decPerLog float64
	for j, r := range p3[2] {
		u := ulpDist(p4[2][j], r)
		lg := math.Abs(math.Log(float64(r)))
		decMax, decSum = max(decMax, u), decSum+float64(u)
		if u > 0 {
			decDiff++
			decPerLog = max(decPerLog, float64(u)/(1+lg))
		}
		if float64(u) > prep4DecULP+prep4DecLogULP*lg {
			t.Errorf("%s: dec value %d: prep3 %g, prep4 %g: %d ulps apart (allowed %.1f)", name, j, r, p4[2][j], u, prep4DecULP+prep4DecLogULP*lg)
		}
	}
	for j, r := range p3[3] {
		u := ulpDist(p4[3][j], r)
		betaMax, betaSum = max(betaMax, u), betaSum+float64(u)
		if u > 0 {
			betaDiff++
		}
		if u > prep4BetaULP {
			t.Errorf("%s: beta value %d: prep3 %g, prep4 %g: %d ulps apart", name, j, r, p4[3][j], u)
		}
	}
	nd, nb := len(p3[2]), len(p3[3])
	t.Logf("%s: prep4 against prep3: qn, kn equal; dec %d of %d differ, max %d ulps, mean %.3f, max ulps/(1+|ln dec|) %.2f; beta %d of %d differ, max %d ulps, mean %.3f",
		name, decDiff, nd, decMax, decSum/float64(max(nd, 1)), decPerLog, betaDiff, nb, betaMax, betaSum/float64(max(nb, 1)))
}
