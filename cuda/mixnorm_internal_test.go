package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestAttnResMixNorm: the fused mix and norm (k_attnres_norm3_*, k_attnres_norm2_*) gives the bits of AttnResMix then RMSNorm
// (Options.UnfusedMixNorm), output and weights, at every width of each thread layout (a block over the
// row: 2,048, 4,096, 7,168 and 8,192; a warp over it from shared memory: 128, 256, 512, 1,000, 1,024),
// for 1, 2, 3, 9 and 33 vectors, quiet and with the weights, with the float32 output left unwritten and
// written (Options.EagerWidening), in both versions of the wide rows' kernel (3 and 2). The fused op must have run (its output narrow-only), and a width
// RMSNorm keeps no copy of (100: not a multiple of 8) must run the two ops and give their bits too.
func TestAttnResMixNorm(t *testing.T) {
	b := newLtBackend(t, false)
	rng := rand.New(rand.NewPCG(41, 42))
	const rows = 333
	for _, cols := range []int{7168, 2048, 4096, 8192, 128, 256, 512, 1000, 1024, 100} {
		fused := b.keepsNarrow(cols)
		vs := make([]ops.Tensor, 33)
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
		for _, n := range []int{1, 2, 3, 9, 33} { // 33: past version 3's 32 vectors
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
					for _, form := range []string{"v3", "v2"} {
						b.mixForm = form
						name := name + ", form " + form
						got, gotP, only := run(false)
						b.mixForm = ""
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
		}
		t.Logf("%d columns (fused: %v): the fused op's bits are AttnResMix then RMSNorm's", cols, fused)
	}
}

// TestNormKernelsListed (no GPU): every kernel name the norms, the mix and the fused mix and norm can
// launch, at every width version 2 takes and 1 to 9 vectors, is one that kernels.go loads from norm.cu
// (a name missing there fails only at launch, on a device).
func TestNormKernelsListed(t *testing.T) {
	listed := map[string]bool{}
	for _, f := range kernelFiles {
		if f.file == "norm.cu" {
			for _, k := range f.kernels {
				listed[k] = true
			}
		}
	}
	check := func(what string, cols int, name string, ok bool) {
		t.Helper()
		if !ok {
			t.Fatalf("%s at %d columns: version 2 refused", what, cols)
		}
		if !listed[name] {
			t.Errorf("%s at %d columns: %s is not among norm.cu's kernels in kernels.go", what, cols, name)
		}
	}
	for cols := 4; cols <= norm2Max; cols += 4 {
		name, _, ok := rmsnorm2Kernel(cols, 1)
		check("RMSNorm", cols, name, ok)
		name, ok = attnres2Kernel(cols)
		check("AttnResMix", cols, name, ok)
		for n := 1; n <= mixMaxV3+1; n++ {
			for _, form := range []string{"v3", "v2"} {
				name, _, ok := mixNormKernel(form, cols, n)
				check(fmt.Sprintf("AttnResMixNorm of %d vectors (%s)", n, form), cols, name, ok)
			}
		}
	}
}
