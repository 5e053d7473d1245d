package cuda

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// frsqrtFast is common.cuh's frsqrt_fast with rsqrt.approx's estimate given as y0: the Newton step in
// float64 with its fused multiply-adds, the rounding to float32 (cvt.rn.f32.f64) and the test.
func frsqrtFast(x, y0 float32) (float32, bool) {
	xd, yd := float64(x), float64(y0)
	e := math.FMA(-float64(xd*yd), yd, 1) // float64(...): rounded, never fused
	y1 := math.FMA(float64(0.5*yd), e, yd)
	low := uint32(math.Float64bits(y1)) & 0x1fffffff
	ok := math.Float32bits(x)-0x00800000 < 0x7f000000 && low-0x0ffff000 > 0x2000
	return float32(y1), ok
}

// rsqrtRN is 1/sqrt(x) rounded to the nearest float32 (what __frsqrt_rn returns, 0 ulps): from 200 bits.
func rsqrtRN(x float32) float32 {
	s := new(big.Float).SetPrec(200).SetFloat64(float64(x))
	s.Sqrt(s)
	r, _ := new(big.Float).SetPrec(200).Quo(big.NewFloat(1).SetPrec(200), s).Float32()
	return r
}

// TestFrsqrtFast: where frsqrt_fast's test passes, its value is 1/sqrt(x) correctly rounded, for estimates
// y0 anywhere within 4 times rsqrt.approx's stated bound (2^-22.9) of 1/sqrt(x), over positive normal
// floats of every binade and floats whose 1/sqrt lies next to a rounding midpoint; and the test passes for
// all but a few random x.
func TestFrsqrtFast(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	n := 100000
	if testing.Short() {
		n = 10000
	}
	bound := math.Exp2(-22.9)
	fast, total := 0, 0
	check := func(x float32, count bool) {
		want := rsqrtRN(x)
		r := 1 / math.Sqrt(float64(x)) // within 2^-52 of 1/sqrt(x): far inside the spread of y0 below
		for _, k := range []float64{-4, -1, -0.5, 0, 0.5, 1, 4} {
			y0 := float32(r * (1 + k*bound))
			if k == -4 || k == 4 { // the float32 nearest the end of the range, moved inside it
				for math.Abs(float64(y0)/r-1) > 4*bound {
					y0 = math.Nextafter32(y0, float32(r))
				}
			}
			got, ok := frsqrtFast(x, y0)
			if k == 1 && count {
				total++
				if ok {
					fast++
				}
			}
			if ok && math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("x %g (%#x), y0 %g (%+g of the bound): frsqrt_fast %g (%#x), 1/sqrt(x) rounded %g (%#x)",
					x, math.Float32bits(x), y0, float64(y0)/r-1, got, math.Float32bits(got), want, math.Float32bits(want))
			}
		}
	}
	for range n {
		check(math.Float32frombits(0x00800000+rng.Uint32N(0x7f000000)), true) // every binade
		check(float32(rng.Float64()*256+1e-6), true)                          // sums of squares as the norms meet them
	}
	// near midpoints: m a midpoint between two floats, x = 1/m^2 and its neighbours
	for range n / 4 {
		m := math.Float64frombits(math.Float64bits(float64(math.Float32frombits(0x20000000+rng.Uint32N(0x3f000000)))) | 1<<28)
		x := float32(1 / (m * m))
		for d := int32(-3); d <= 3; d++ {
			if y := math.Float32frombits(uint32(int32(math.Float32bits(x)) + d)); y > 0 {
				check(y, false)
			}
		}
	}
	t.Logf("fast path on %d of %d random values", fast, total)
	if total-fast > total/1000 {
		t.Errorf("the fast path failed on %d of %d random values (want at most 0.1%%)", total-fast, total)
	}
}

// TestFrsqrtFastRange: frsqrt_fast's test fails for every x outside the positive normal floats.
func TestFrsqrtFastRange(t *testing.T) {
	for _, bits := range []uint32{0, 1, 0x007fffff, 0x7f800000, 0x7fc00000, 0x7f800001, 0x80000000, 0x80800000, 0xbf800000, 0xff800000} {
		x := math.Float32frombits(bits)
		if _, ok := frsqrtFast(x, 1); ok {
			t.Errorf("x %#x: the fast path's test passes", bits)
		}
	}
}
