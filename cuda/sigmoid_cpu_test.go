package cuda_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/cuda"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestSigmoidFastPath: MulSigmoid and ShortConvSiLU, whose BF16 kernels take common.cuh's single-precision
// fast path (mul_sigmoid_rnd, silu_rnd), give the CPU backend's bits (its sigmoid in double precision)
// over millions of values in both precisions: products of order 1, gates over [-100, 100], magnitudes
// from 2^-100 to 2^100, and finite values of any bits (denormals, extremes, signed zeros).
func TestSigmoidFastPath(t *testing.T) {
	const rows, cols = 4096, 1024
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		p := newPair(t, cuda.Options{Precision: prec, Sync: true})
		rng := rand.New(rand.NewPCG(51, uint64(prec)))
		for kind := range 4 {
			xv, gv := make([]float32, rows*cols), make([]float32, rows*cols)
			for i := range xv {
				switch kind {
				case 0:
					xv[i], gv[i] = float32(3*rng.NormFloat64()), float32(3*rng.NormFloat64())
				case 1:
					xv[i], gv[i] = float32(rng.NormFloat64()), float32(10*rng.NormFloat64())
				case 2:
					xv[i] = float32(math.Ldexp(2*rng.Float64()-1, rng.IntN(200)-100))
					gv[i] = float32(200*rng.Float64() - 100)
				case 3:
					xv[i], gv[i] = finiteBits(rng), finiteBits(rng)
				}
			}
			x, g := p.upload(rows, cols, xv), p.upload(rows, cols, gv)
			name := fmt.Sprintf("%v, inputs of kind %d", prec, kind)
			gy, ge := p.g.MulSigmoid(x.g, g.g)
			cy, ce := p.c.MulSigmoid(x.c, g.c)
			gvals, cvals := p.host(both{gy, cy}, ge, ce)
			p.exact("MulSigmoid "+name, gvals, cvals)
			taps := p.weight(ops.WeightF32, cols, 4, 0.5)
			l := ops.Layout{Starts: []int{0, 1000, 1001, rows}}
			gy, ge = p.g.ShortConvSiLU(x.g, taps.g, l)
			cy, ce = p.c.ShortConvSiLU(x.c, taps.c, l)
			gvals, cvals = p.host(both{gy, cy}, ge, ce)
			p.exact("ShortConvSiLU "+name, gvals, cvals)
		}
	}
}

// finiteBits returns a float32 of random bits that is not NaN or infinite (NaN payloads differ between
// the CPU's and the GPU's arithmetic; the ops never see them from finite inputs).
func finiteBits(rng *rand.Rand) float32 {
	for {
		if v := math.Float32frombits(rng.Uint32()); !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) {
			return v
		}
	}
}
