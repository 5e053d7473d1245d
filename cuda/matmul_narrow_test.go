package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestMatMulNarrowBits: at the shapes of K3's KDA projections (q, k, v: 12,288 x 7,168) and a few
// others, MatMulNarrow's bfloat16 outputs from cuBLASLt's epilogue are MatMul's float32 sums rounded by
// their reader, bit for bit, at row counts with partial tiles; and its output is narrow-only there (the
// narrow path ran, not its fallback to MatMul).
func TestMatMulNarrowBits(t *testing.T) {
	b := testBackend(t, Options{Precision: ops.BF16})
	if !b.convNarrow() || b.lt == nil {
		t.Skip("no narrow matmul outputs here (BF16 precision on the tensor cores with cuBLASLt)")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, sh := range [][2]int{{12288, 7168}, {128, 7168}, {512, 256}} {
		m, k := sh[0], sh[1]
		wv := make([]float32, m*k)
		for i := range wv {
			wv[i] = float32(rng.NormFloat64() * 0.02)
		}
		raw := make([]byte, 2*len(wv))
		bf16.Encode(raw, wv)
		w, err := b.Upload(ops.WeightBF16, m, k, raw)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 300, 4099} {
			xv := make([]float32, n*k)
			for i := range xv {
				xv[i] = float32(rng.NormFloat64())
			}
			x, err := b.FromHost(n, k, xv)
			if err != nil {
				t.Fatal(err)
			}
			want, err := b.MatMul(x, w)
			if err != nil {
				t.Fatal(err)
			}
			got, err := b.MatMulNarrow(x, w)
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("%dx%d by %dx%d", n, k, m, k)
			if !got.(*Tensor).narrowOnly {
				t.Errorf("%s: MatMulNarrow's output is not narrow-only: no pinned bfloat16-output algorithm?", name)
			}
			gv, err := b.ToHost(got)
			if err != nil {
				t.Fatal(err)
			}
			wantv, err := b.ToHost(want)
			if err != nil {
				t.Fatal(err)
			}
			sameBitsQuiet(t, name+": MatMulNarrow against MatMul", gv, wantv, m)
			b.Free(x)
			b.Free(want)
			b.Free(got)
		}
		// the two plans, for the record: the bfloat16 one should run the float32 one's configuration
		// (adoptConfig) where the heuristic offers it
		if err := b.run("plans", func(c *opCtx) error {
			s16, err := b.lt.shapeOut(m, k, bind.R16BF)
			if err != nil {
				return err
			}
			s32, err := b.lt.shape(m, k)
			if err != nil {
				return err
			}
			t.Logf("%dx%d: bfloat16-output plan: %v; float32-output plan: %v", m, k, s16.config, s32.config)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		b.Free(w)
	}
}
