package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/bf16"
)

// mulSigmoidExact is the CPU backend's statement in BF16 precision (replay/cpu: MulSigmoid, silu):
// bfloat16(float32(x * float32(1 / (1 + e^-g)))) with the sigmoid in double precision.
func mulSigmoidExact(x, g float32) float32 {
	sig := float32(1 / (1 + math.Exp(-float64(g))))
	return bf16.Round(x * sig)
}

// mulSigmoidFast emulates common.cuh's mul_sigmoid_fast in float32 with expf's result moved by
// off ulps (CUDA's expf is within 2 of the correctly rounded value): the bfloat16 value and whether the
// fast path answers (false: the kernel runs the double-precision statement).
func mulSigmoidFast(x, g float32, off int) (float32, bool) {
	if !(g > -80 && g < 80) {
		return 0, false
	}
	e := float32(math.Exp(-float64(g)))
	bits := int64(math.Float32bits(e)) + int64(off) // e > 0: adjacent bit patterns are adjacent floats
	e = math.Float32frombits(uint32(bits))
	s := float32(1) + e            // __fadd_rn
	sig := float32(1 / float64(s)) // __frcp_rn
	y := x * sig                   // __fmul_rn
	u := math.Float32bits(y)
	if (u>>23)&0xff-27 <= 226 && (u&0xffff)-0x7fe0 > 64 {
		return math.Float32frombits((u + 0x8000) &^ 0xffff), true
	}
	return 0, false
}

// TestMulSigmoidMargin: wherever mul_sigmoid_fast's value stands, with expf anywhere within 2 ulps,
// its bfloat16 value is the double-precision statement's; and it answers for nearly every value (the
// double-precision fallback is rare, or the kernel gains nothing). Random gates and inputs, and inputs
// chosen to put the product within a few float32 ulps of a bfloat16 rounding midpoint.
func TestMulSigmoidMargin(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	const n = 400000
	fast, total := 0, 0
	check := func(x, g float32, count bool) {
		want := mulSigmoidExact(x, g)
		for off := -2; off <= 2; off++ {
			got, ok := mulSigmoidFast(x, g, off)
			if off == 0 && count {
				total++
				if ok {
					fast++
				}
			}
			if ok && math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("x %g (%#x), g %g (%#x), expf off by %d ulps: fast path %g, the double-precision statement %g",
					x, math.Float32bits(x), g, math.Float32bits(g), off, got, want)
			}
		}
	}
	for range n {
		// gates of the size activations have (counted for the fast path's rate), and any gate the fast
		// path takes (below about -70 the product is under 2^-100: the double-precision statement runs)
		g := float32(rng.NormFloat64() * 4)
		u := float32(160*rng.Float64() - 80)
		x := float32(rng.NormFloat64())
		check(x, g, true) // MulSigmoid and the gated norm: an independent input and gate
		check(g, g, true) // silu
		check(x, u, false)
		check(u, u, false)
	}
	random := float64(fast) / float64(total)
	// near midpoints: x = midpoint / sigmoid, moved by up to 3 float32 ulps
	for range n / 4 {
		g := float32(rng.NormFloat64() * 4)
		sig := float32(1 / (1 + math.Exp(-float64(g))))
		mid := math.Float32frombits(math.Float32bits(float32(rng.NormFloat64()))&^0xffff | 0x8000)
		x := mid / sig
		for d := -3; d <= 3; d++ {
			check(math.Float32frombits(uint32(int64(math.Float32bits(x))+int64(d))), g, false)
		}
	}
	t.Logf("fast path on %.3f%% of %d random values", 100*random, total)
	if random < 0.995 {
		t.Errorf("the fast path answered only %.3f%% of random values (want at least 99.5%%)", 100*random)
	}
}
