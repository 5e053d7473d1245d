package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestTensorCoreVersionsEqual: matmul_tc.cu versions 2 and 3 (scalar and vectorised staging) give the
// same bits for bfloat16 and MXFP4 weights: they differ only in how a panel reaches shared memory.
func TestTensorCoreVersionsEqual(t *testing.T) {
	b := testBackend(t, Options{Precision: ops.BF16, Sync: true})
	rng := rand.New(rand.NewPCG(5, 6))
	const n, k, m = 300, 3584, 224 // m: ffn of the test expert, a multiple of 32
	xv := make([]float32, n*k)
	for i := range xv {
		xv[i] = float32(rng.NormFloat64())
	}
	x, err := b.FromHost(n, k, xv)
	if err != nil {
		t.Fatal(err)
	}
	wv := make([]float32, m*k)
	for i := range wv {
		wv[i] = float32(0.02 * rng.NormFloat64())
	}
	raw := make([]byte, 2*len(wv))
	bf16.Encode(raw, wv)
	w, err := b.Upload(ops.WeightBF16, m, k, raw)
	if err != nil {
		t.Fatal(err)
	}
	// an expert whose w1 is m x k in MXFP4
	packed, scales := make([]byte, m*k/2), make([]byte, m*k/32)
	for i := range packed {
		packed[i] = byte(rng.IntN(256))
	}
	for i := range scales {
		scales[i] = byte(118 + rng.IntN(5))
	}
	w2p, w2s := make([]byte, k*m/2), make([]byte, k*m/32)
	for i := range w2s {
		w2s[i] = 127
	}
	e, err := b.UploadExpert(0, k, m, packed, scales, packed, scales, w2p, w2s)
	if err != nil {
		t.Fatal(err)
	}
	xt, wt, et := x.(*Tensor), w.(*Tensor), e.(*Expert)
	for _, c := range []struct {
		what   string
		w      weightRef
		v2, v3 string
	}{
		{what: "bf16 weight", w: weightOf(wt), v2: "k_matmul_tc_bf16", v3: "k_matmul_tc_bf16_vec"},
		{what: "MXFP4 weight", w: et.matrix(0), v2: "k_matmul_tc_mxfp4", v3: "k_matmul_tc_mxfp4_vec"},
	} {
		got := make([][]float32, 2)
		err := b.run("test", func(oc *opCtx) error {
			for i, kern := range []string{c.v2, c.v3} {
				out, err := oc.temp(4 * n * m)
				if err != nil {
					return err
				}
				if err := oc.gemmKernel(kern, tcTile, out, xt.ptr, n, c.w, 1); err != nil {
					return err
				}
				got[i] = make([]float32, n*m)
				if err := download(b, got[i], out); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		diff := 0
		for i := range got[0] {
			if math.Float32bits(got[0][i]) != math.Float32bits(got[1][i]) {
				diff++
			}
		}
		if diff > 0 {
			t.Errorf("%s: %d of %d values differ between version 2 and version 3", c.what, diff, n*m)
		} else {
			t.Logf("%s: versions 2 and 3 agree bit for bit on %dx%d by %dx%d", c.what, n, k, m, k)
		}
	}
	b.Free(x)
	b.Free(w)
	b.Free(e)
}
