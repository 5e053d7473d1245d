package cpu

import "math"

// Scalar float32 functions shared by the ops, so that every op that uses one (SiLU in ShortConvSiLU,
// sigmoid in MulSigmoid and GatedRMSNorm, SiTU in SiTUGLU and ExpertsAccumulate) gets the same bits.
// Transcendentals are evaluated in float64 and rounded once to float32: that is within half a float32 ulp
// of the exact value and does not depend on the platform's float32 libm.

// sigmoid returns float32(1 / (1 + e^-x)).
func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// exp32 returns float32(e^x).
func exp32(x float32) float32 { return float32(math.Exp(float64(x))) }

// tanh32 returns float32(tanh x).
func tanh32(x float32) float32 { return float32(math.Tanh(float64(x))) }

// rsqrt32 returns float32(1 / sqrt(x)): the normalising factor of RMSNorm, AttnRes and the KDA L2 norms,
// computed once per vector and then multiplied in (the reference order x * rsqrt(mean + eps)).
func rsqrt32(x float32) float32 { return float32(1 / math.Sqrt(float64(x))) }

// silu returns x * sigmoid(x) in float32.
func silu(x float32) float32 { return x * sigmoid(x) }

// situ is one element of the SiTU-GLU (K3_SPEC.md 5.4), in float32 left to right:
// (beta * tanh(a/beta)) * sigmoid(a) * (linBeta * tanh(b/linBeta)).
func situ(a, b, beta, linBeta float32) float32 {
	gate := beta * tanh32(a/beta) * sigmoid(a)
	lin := linBeta * tanh32(b/linBeta)
	return gate * lin
}

// sumSquares returns sum_i x[i]^2 in float32, ascending i, products rounded before the add.
func sumSquares(x []float32) float32 {
	var s float32
	for _, v := range x {
		s += float32(v * v)
	}
	return s
}
