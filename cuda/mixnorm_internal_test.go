package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestAttnResMixNorm: the fused mix and norm (k_attnres_norm2_*) gives the bits of AttnResMix then RMSNorm
// (Options.UnfusedMixNorm), output and weights, at every width of each thread layout (a block over the
// row: 2,048, 4,096, 7,168 and 8,192; a warp over it from shared memory: 128, 256, 512, 1,000, 1,024),
// for 1, 2, 3 and 9 vectors, quiet and with the weights, with the float32 output left unwritten and
// written (Options.EagerWidening). The fused op must have run (its output narrow-only), and a width
// RMSNorm keeps no copy of (100: not a multiple of 8) must run the two ops and give their bits too.
func TestAttnResMixNorm(t *testing.T) {
	b := newLtBackend(t, false)
	rng := rand.New(rand.NewPCG(41, 42))
	const rows = 333
	for _, cols := range []int{7168, 2048, 4096, 8192, 128, 256, 512, 1000, 1024, 100} {
		fused := b.keepsNarrow(cols)
		vs := make([]ops.Tensor, 9)
		for i := range vs {
			x, err := b.FromHost(rows, cols, fastFill(rng, rows*cols, 1+float64(i)/4))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free(x)
			vs[i] = x
		}
		wg, err := b.FromHost(1, cols, fastFill(rng, cols, 0.05))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free(wg)
		w, err := b.FromHost(1, cols, fastFill(rng, cols, 1))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free(w)
		for _, n := range []int{1, 2, 3, 9} {
			for _, weights := range []bool{false, true} {
				for _, eager := range []bool{false, true} {
					name := fmt.Sprintf("%d columns, %d vectors, weights %v, eager widening %v", cols, n, weights, eager)
					run := func(unfused bool) ([]float32, []float32, bool) {
						b.opts.UnfusedMixNorm, b.opts.EagerWidening = unfused, eager
						defer func() { b.opts.UnfusedMixNorm, b.opts.EagerWidening = false, false }()
						y, p, err := b.AttnResMixNorm(vs[:n], wg, w, 1e-5, weights)
						if err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						defer b.Free(y)
						only := y.(*Tensor).narrowOnly
						v, err := b.ToHost(y)
						if err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						return v, p, only
					}
					want, wantP, _ := run(true)
					got, gotP, only := run(false)
					if only != (fused && !eager) {
						t.Errorf("%s: output narrow-only %v, want %v (the fused kernel runs: %v)", name, only, fused && !eager, fused)
					}
					if (gotP == nil) != !weights || len(gotP) != len(wantP) {
						t.Errorf("%s: %d weights, want %d", name, len(gotP), len(wantP))
					} else {
						sameBitsQuiet(t, name+", weights", gotP, wantP, n)
					}
					sameBitsQuiet(t, name, got, want, cols)
				}
			}
		}
		t.Logf("%d columns (fused: %v): the fused op's bits are AttnResMix then RMSNorm's", cols, fused)
	}
}
