package cuda_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/potato-k3/potato-k3/cuda"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestNorm2AgainstCPU: RMSNorm, GatedRMSNorm and AttnResMix (norm.cu version 2 where the width allows,
// version 1 else) within TestAgainstCPU's bounds of the CPU backend, in both precisions with the default
// options (in BF16 the norms also write their bfloat16 copy), at widths that take each instance and a
// fallback, 1 and 65 rows; the first and last rows equal, bit for bit, themselves computed alone; and Add
// (k_add4) and Gather (k_gather4) give the CPU backend's bits.
func TestNorm2AgainstCPU(t *testing.T) {
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		p := newPair(t, cuda.Options{Precision: prec, Sync: true})
		g, c := p.g, p.c
		relBound, frac := 1e-5, 1.0
		if p.bf {
			relBound, frac = 1.0/64, 0.05
		}
		for _, width := range []int{4, 96, 128, 132, 1028, 3584, 7168, 8192, 8196} {
			for _, rows := range []int{1, 65} {
				name := fmt.Sprintf("%v/%dx%d", prec, rows, width)
				x, gate, w := p.act(rows, width, 2), p.act(rows, width, 3), p.weight(ops.WeightBF16, 1, width, 1)
				xv, _ := p.host(x, nil, nil)
				gatev, _ := p.host(gate, nil, nil)
				for _, gated := range []bool{false, true} {
					run := func(b ops.Backend, x, gate ops.Tensor, w ops.Tensor) (ops.Tensor, error) {
						if gated {
							return b.GatedRMSNorm(x, w, gate, 1e-5)
						}
						return b.RMSNorm(x, w, 1e-5)
					}
					what := fmt.Sprintf("%s RMSNorm (gated %v)", name, gated)
					gy, ge := run(g, x.g, gate.g, w.g)
					cy, ce := run(c, x.c, gate.c, w.c)
					gv, cv := p.host(both{gy, cy}, ge, ce)
					p.near(what, gv, cv, frac, relBound)
					for _, r := range []int{0, rows - 1} {
						xr, err := g.FromHost(1, width, xv[r*width:(r+1)*width])
						if err != nil {
							t.Fatal(err)
						}
						gr, err := g.FromHost(1, width, gatev[r*width:(r+1)*width])
						if err != nil {
							t.Fatal(err)
						}
						alone, err := run(g, xr, gr, w.g)
						if err != nil {
							t.Fatal(err)
						}
						av, err := g.ToHost(alone)
						if err != nil {
							t.Fatal(err)
						}
						if n, _ := diff(av, gv[r*width:(r+1)*width], 1e-30); n > 0 {
							t.Errorf("%s: row %d alone differs from the wave at %d of %d values", what, r, n, width)
						}
					}
				}
				for n := 1; n <= 3; n++ {
					what := fmt.Sprintf("%s AttnResMix of %d", name, n)
					var vs []both
					var gvs, cvs []ops.Tensor
					for i := range n {
						v := p.act(rows, width, 0.5+float64(i))
						vs, gvs, cvs = append(vs, v), append(gvs, v.g), append(cvs, v.c)
					}
					// scores of order 3 at every width, as TestAgainstCPU's at 128 columns; their float32
					// rounding still grows with the sum's length, so the bounds on the weights (and, in FP32,
					// on the output) grow as sqrt(width / 128)
					wg := p.weight(ops.WeightF32, 1, width, 0.3*math.Sqrt(128/float64(width)))
					grow := max(1, math.Sqrt(float64(width)/128))
					gy, gp, ge := g.AttnResMix(gvs, wg.g)
					cy, cp, ce := c.AttnResMix(cvs, wg.c)
					gv, cv := p.host(both{gy, cy}, ge, ce)
					outBound := relBound
					if !p.bf {
						outBound *= grow
					}
					p.near(what, gv, cv, frac, outBound)
					p.near(what+" weights", gp, cp, 1, 1e-5*grow)
					r := rows - 1
					var rowT []ops.Tensor
					for _, v := range vs {
						hv, _ := p.host(v, nil, nil)
						one, err := g.FromHost(1, width, hv[r*width:(r+1)*width])
						if err != nil {
							t.Fatal(err)
						}
						rowT = append(rowT, one)
					}
					alone, ap, err := g.AttnResMix(rowT, wg.g)
					if err != nil {
						t.Fatal(err)
					}
					av, err := g.ToHost(alone)
					if err != nil {
						t.Fatal(err)
					}
					if k, _ := diff(av, gv[r*width:], 1e-30); k > 0 {
						t.Errorf("%s: row %d alone differs from the wave at %d of %d values", what, r, k, width)
					}
					if k, _ := diff(ap, gp[r*n:], 1e-30); k > 0 {
						t.Errorf("%s: row %d's weights alone differ from the wave's", what, r)
					}
				}
				y := p.act(rows, width, 3)
				gy, ge := g.Add(x.g, y.g)
				cy, ce := c.Add(x.c, y.c)
				gv, cv := p.host(both{gy, cy}, ge, ce)
				p.exact(name+" Add", gv, cv)
			}
			tab := p.weight(ops.WeightBF16, 50, width, 1)
			ids := []int32{3, 49, 0, 3, 17}
			gy, ge := g.Gather(tab.g, ids)
			cy, ce := c.Gather(tab.c, ids)
			gv, cv := p.host(both{gy, cy}, ge, ce)
			p.exact(fmt.Sprintf("%v Gather width %d", prec, width), gv, cv)
		}
	}
}
