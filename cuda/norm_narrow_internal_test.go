package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestGatedRMSNormNarrowX: GatedRMSNorm over a narrow-only x (KDA's output in BF16 precision, kda.go) reads
// its bfloat16 copy in place (k_rmsnorm2gb: x still narrow-only after it) and gives the bits of the same
// values in float32 storage (k_rmsnorm2g), at K3's groups of 128 and at 256, for row counts with partial
// blocks; the gate a MatMul-like unrounded float32 tensor as in the model.
func TestGatedRMSNormNarrowX(t *testing.T) {
	b := testBackend(t, Options{Precision: ops.BF16})
	if b.normVer == 1 || b.gateLate {
		t.Skip("the gated norm's early-gate kernel is not in use")
	}
	rng := rand.New(rand.NewPCG(21, 22))
	up := func(rows, cols int, scale float64) ops.Tensor {
		v := make([]float32, rows*cols)
		for i := range v {
			v[i] = float32(scale * rng.NormFloat64())
		}
		x, err := b.FromHost(rows, cols, v)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	for _, g := range []int{128, 256} {
		w := up(1, g, 0.5)
		for _, rows := range []int{1, 7, 300} {
			const heads = 3
			x := up(rows, heads*g, 1)
			gate := up(rows, heads*g, 2)
			want, err := b.GatedRMSNorm(x, w, gate, 1e-5)
			if err != nil {
				t.Fatal(err)
			}
			xn := narrowOnlyCopy(t, b, x)
			got, err := b.GatedRMSNorm(xn, w, gate, 1e-5)
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("groups of %d, %d rows", g, rows)
			if !xn.narrowOnly {
				t.Errorf("%s: GatedRMSNorm widened its narrow-only x", name)
			}
			gv, err := b.ToHost(got)
			if err != nil {
				t.Fatal(err)
			}
			wv, err := b.ToHost(want)
			if err != nil {
				t.Fatal(err)
			}
			sameBitsQuiet(t, name+": narrow x against float32 x", gv, wv, heads*g)
			for _, x := range []ops.Tensor{x, gate, want, xn, got} {
				b.Free(x)
			}
		}
		b.Free(w)
	}
}
