package cuda

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// latentInputs are random MLA inputs with the keys given by a latent and kv_b: q, latent, ks, kv_b.
func latentInputs(t testing.TB, b *Backend, rng *rand.Rand, rows, heads, nope, shared, vdim, lat int) (q, lt, ks, kvb ops.Tensor) {
	t.Helper()
	mk := func(cols int) ops.Tensor {
		x, err := b.FromHost(rows, cols, fastFill(rng, rows*cols, 1))
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	return mk(heads * (nope + shared)), mk(lat), mk(shared), bf16Weight(t, b, rng, heads*(nope+vdim), lat, 1/math.Sqrt(float64(lat)))
}

// bitsDiffer counts the values of x and y whose bits differ (x, y on the host).
func bitsDiffer(x, y []float32) int {
	n := 0
	for i := range x {
		if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
			n++
		}
	}
	return n
}

// TestMLALatentGroups: keys from the latent in groups of heads of one size (7 heads in groups of 3, the
// last group's batched calls starting at head 4 so that it keeps the count) give the bits of one group of
// all 7; against MLA over MatMul's kv (the expansion before mla_latent.go) the differing values are
// counted (the two GEMM configurations may sum a key in another order). On both tensor-core kernels: the
// wgmma one where the device has it, and mla_tc.cu's (Options.MLAMmaSync), which read the same arrays.
func TestMLALatentGroups(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
	}{{"default kernel", Options{Precision: ops.BF16, Sync: true}}, {"mma.sync kernel", Options{Precision: ops.BF16, Sync: true, MLAMmaSync: true}}} {
		t.Run(c.name, func(t *testing.T) { mlaLatentGroups(t, testBackend(t, c.opts)) })
	}
}

func mlaLatentGroups(t *testing.T, b *Backend) {
	const heads, nope, shared, vdim, lat = 7, 128, 64, 128, 512
	if !b.MLAFromLatent(heads, nope, shared, vdim, lat) {
		t.Skip("no keys from the latent on this device (needs cuBLASLt and the tensor-core MLA)")
	}
	rng := rand.New(rand.NewPCG(41, 42))
	l := ops.Layout{Starts: []int{0, 130, 300, 301}}
	rows := l.Tokens()
	q, lt, ks, kvb := latentInputs(t, b, rng, rows, heads, nope, shared, vdim, lat)
	host := func(x ops.Tensor, err error) []float32 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		v, err := b.ToHost(x)
		if err != nil {
			t.Fatal(err)
		}
		b.Free(x)
		return v
	}
	one := host(b.MLALatent(q, lt, ks, kvb, heads, nope, shared, vdim, l))
	saved := mlaTCTempMax
	mlaTCTempMax = 3 * rows * (192 + 128) * 2
	grouped := host(b.MLALatent(q, lt, ks, kvb, heads, nope, shared, vdim, l))
	mlaTCTempMax = saved
	if n := bitsDiffer(one, grouped); n > 0 {
		t.Fatalf("%d of %d values differ between one group of %d heads and groups of 3", n, len(one), heads)
	}
	kv, err := b.MatMul(lt, kvb)
	if err != nil {
		t.Fatal(err)
	}
	expanded := host(b.MLA(q, kv, ks, heads, nope, shared, vdim, l))
	b.Free(kv)
	n := bitsDiffer(one, expanded)
	if n > 2+len(one)/50 {
		t.Fatalf("%d of %d values differ from MLA over MatMul's kv: more than a rounding here and there", n, len(one))
	}
	t.Logf("keys from the latent: %d values equal in groups of 3 and in one group; %d differ from MLA over MatMul's kv", len(one), n)
}

// TestMLALatentTiming times MLA at K3's sizes (96 heads of 128 + 64 / 128, latent 512) over 16 sequences
// of 4,096 tokens, with the keys from the latent (MLALatent) and expanded as before (kv_b's MatMul, then
// MLA with k_mla_prep), and counts the values whose bits differ; skipped with -short.
func TestMLALatentTiming(t *testing.T) {
	skipTiming(t)
	b := testBackend(t, Options{Precision: ops.BF16})
	const heads, nope, shared, vdim, lat, seqs, n = 96, 128, 64, 128, 512, 16, 4096
	if !b.MLAFromLatent(heads, nope, shared, vdim, lat) {
		t.Skip("no keys from the latent on this device")
	}
	rng := rand.New(rand.NewPCG(43, 44))
	starts := make([]int, seqs+1)
	for i := range starts {
		starts[i] = i * n
	}
	l := ops.Layout{Starts: starts}
	rows := l.Tokens()
	q, lt, ks, kvb := latentInputs(t, b, rng, rows, heads, nope, shared, vdim, lat)
	latent := func() (ops.Tensor, error) { return b.MLALatent(q, lt, ks, kvb, heads, nope, shared, vdim, l) }
	expanded := func() (ops.Tensor, error) {
		kv, err := b.MatMul(lt, kvb)
		if err != nil {
			return nil, err
		}
		defer b.Free(kv)
		return b.MLA(q, kv, ks, heads, nope, shared, vdim, l)
	}
	var outs [2][]float32
	for i, f := range []func() (ops.Tensor, error){latent, expanded} {
		var best time.Duration
		for r := range 4 { // the first warms up
			if err := b.Sync(); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			out, err := f()
			if err == nil {
				err = b.Sync()
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); r == 1 || (r > 1 && d < best) {
				best = d
			}
			if r == 3 {
				if outs[i], err = b.ToHost(out); err != nil {
					t.Fatal(err)
				}
			}
			b.Free(out)
		}
		t.Logf("TIMING MLA %d x %d tokens, %d heads, keys %s: %.2f ms (best of 3)", seqs, n, heads,
			[]string{"from the latent (batched kv_b GEMMs)", "expanded (kv_b MatMul + k_mla_prep)"}[i], float64(best.Microseconds())/1e3)
	}
	t.Logf("TIMING MLA keys from the latent: %d of %d values differ from the expanded keys' result", bitsDiffer(outs[0], outs[1]), len(outs[0]))
}

// TestLatentCounts: the batch counts MLAFromLatent plans are every group size mlaTC's grouping gives, for
// any row count (no GPU needed).
func TestLatentCounts(t *testing.T) {
	for _, heads := range []int{1, 2, 7, 96, 97} {
		planned := map[int]bool{}
		for _, c := range latentCounts(heads) {
			planned[c] = true
		}
		for most := 1; most <= heads+1; most++ { // mlaTC's group before balancing: min(heads, tempMax / perHead)
			group := max(1, min(heads, most))
			groups := (heads + group - 1) / group
			if c := (heads + groups - 1) / groups; !planned[c] {
				t.Errorf("%d heads, groups of at most %d: a batch of %d heads, not among the planned %v", heads, most, c, latentCounts(heads))
			}
		}
	}
	if got := latentCounts(96); len(got) != 19 || got[0] != 96 || got[len(got)-1] != 1 {
		t.Errorf("latentCounts(96) = %v", got)
	}
}
