package cuda_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/cuda"
	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Tests of MLA version 2 (mla_tc.cu, tensor cores, BF16 precision): against the CPU backend, against
// version 1 on larger sequences, batch invariance across query tiles and key blocks, and timings at K3's
// sizes.

// mlaCase is one MLA shape: heads x (nope + shared) queries, values of vdim, over sequences of lens, with
// queries of scale qs (scores of order qs).
type mlaCase struct {
	heads, nope, shared, vdim int
	lens                      []int
	qs                        float64
}

func (c mlaCase) String() string {
	return fmt.Sprintf("MLA %d heads (%d+%d, v %d) over %v, queries x%g", c.heads, c.nope, c.shared, c.vdim, c.lens, c.qs)
}

func (c mlaCase) layout() ops.Layout {
	starts := []int{0}
	for _, n := range c.lens {
		starts = append(starts, starts[len(starts)-1]+n)
	}
	return ops.Layout{Starts: starts}
}

// mlaKernels are the tensor-core kernels a test runs MLA on: the device's default (mla_wg.cu's wgmma on
// an sm_90a device, else mla_tc.cu's mma.sync) and mma.sync by Options.MLAMmaSync.
var mlaKernels = []struct {
	name string
	opts func(cuda.Options) cuda.Options
}{
	{"default kernel", func(o cuda.Options) cuda.Options { return o }},
	{"mma.sync", func(o cuda.Options) cuda.Options { o.MLAMmaSync = true; return o }},
}

// mlaOnBoth runs MLA of case c on backends a and b over the same random inputs (q of scale c.qs, kv and
// ks of scale 1, drawn from rng in that order) and compares b's outputs with a's: n of total values
// differ in their bits, rel the largest difference relative to |b's| + the rms of b's outputs; da and db
// the calls' times.
func mlaOnBoth(t *testing.T, a, b *cuda.Backend, c mlaCase, rng *rand.Rand) (n, total int, rel float64, da, db time.Duration) {
	t.Helper()
	l := c.layout()
	rows := l.Tokens()
	up := func(cols int, scale float64) (ops.Tensor, ops.Tensor) {
		v := make([]float32, rows*cols)
		for i := range v {
			v[i] = float32(scale * rng.NormFloat64())
		}
		x, err := a.FromHost(rows, cols, v)
		if err != nil {
			t.Fatal(err)
		}
		y, err := b.FromHost(rows, cols, v)
		if err != nil {
			t.Fatal(err)
		}
		return x, y
	}
	qa, qb := up(c.heads*(c.nope+c.shared), c.qs)
	kva, kvb := up(c.heads*(c.nope+c.vdim), 1)
	ksa, ksb := up(c.shared, 1)
	run := func(be *cuda.Backend, q, kv, ks ops.Tensor) ([]float32, time.Duration) {
		start := time.Now()
		y, err := be.MLA(q, kv, ks, c.heads, c.nope, c.shared, c.vdim, l)
		if err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		v, err := be.ToHost(y)
		if err != nil {
			t.Fatal(err)
		}
		return v, d
	}
	va, da := run(a, qa, kva, ksa)
	vb, db := run(b, qb, kvb, ksb)
	var ss float64
	for _, x := range vb {
		ss += float64(x) * float64(x)
	}
	n, rel = diff(va, vb, math.Sqrt(ss/float64(len(vb))))
	return n, len(vb), rel, da, db
}

// TestMLATensorCoresAgainstCPU: the tensor-core kernels differ from the CPU backend's float32 softmax by
// the 2^-17 of their split p (and float32 rounding), so an output moves only where it sits on a bfloat16
// rounding boundary: by one bfloat16 ulp, on a small share of the values. The shapes cover the three
// instantiations (qk/vdim up to 64/64, 128/128, 192/128), sequences shorter and longer than a 64-row
// tile, and a sharper softmax; each kernel (mlaKernels).
func TestMLATensorCoresAgainstCPU(t *testing.T) {
	for _, k := range mlaKernels {
		t.Run(k.name, func(t *testing.T) {
			p := newPair(t, k.opts(cuda.Options{Precision: ops.BF16, Sync: true}))
			for _, c := range []mlaCase{
				{2, 128, 64, 128, []int{70, 3, 130}, 1},
				{2, 128, 64, 128, []int{64, 1, 527}, 1},
				{2, 128, 64, 128, []int{300, 200}, 3},
				{3, 100, 20, 100, []int{90, 200}, 1},
				{4, 16, 8, 12, []int{5, 90, 64}, 1},
			} {
				l := c.layout()
				rows := l.Tokens()
				q := p.act(rows, c.heads*(c.nope+c.shared), c.qs)
				kv := p.act(rows, c.heads*(c.nope+c.vdim), 1)
				ks := p.act(rows, c.shared, 1)
				gy, ge := p.g.MLA(q.g, kv.g, ks.g, c.heads, c.nope, c.shared, c.vdim, l)
				cy, ce := p.c.MLA(q.c, kv.c, ks.c, c.heads, c.nope, c.shared, c.vdim, l)
				gv, cv := p.host(both{gy, cy}, ge, ce)
				p.near(c.String()+", tensor cores", gv, cv, 0.05, 4.0/64)
			}
		})
	}
}

// TestMLAWGAgainstMmaSync: on an sm_90a device, the wgmma kernel (mla_wg.cu) against the mma.sync kernel
// (mla_tc.cu) on the same inputs: the same statement of every row, and the tensor cores sum a chunk of 16
// products the same way in both instructions (run 79: not one value of 3.6 million differed), so the
// bits must be equal. Skipped elsewhere (only mma.sync runs).
func TestMLAWGAgainstMmaSync(t *testing.T) {
	wg := newBackendWith(t, cuda.Options{Precision: ops.BF16, Sync: true})
	if wg.Device().Arch != "sm_90a" {
		t.Skipf("the wgmma kernel runs on sm_90a devices only (this one: %s)", wg.Device().Arch)
	}
	ms := newBackendWith(t, cuda.Options{Precision: ops.BF16, Sync: true, MLAMmaSync: true})
	rng := rand.New(rand.NewPCG(41, 42))
	for _, c := range []mlaCase{
		{8, 128, 64, 128, []int{1000, 37, 2100}, 1},
		{3, 128, 64, 128, []int{100, 640, 64, 7}, 3},
		{3, 100, 20, 100, []int{90, 200}, 1},
		{4, 16, 8, 12, []int{5, 90, 64}, 1},
	} {
		n, total, rel, _, _ := mlaOnBoth(t, wg, ms, c, rng)
		if n > 0 {
			t.Errorf("%s: %d of %d values of the wgmma kernel differ from the mma.sync kernel's bits (max rel diff %.3g); want equal bits", c, n, total, rel)
		} else {
			t.Logf("%s: wgmma and mma.sync: all %d values equal", c, total)
		}
	}
}

// TestMLAVersionsAgree: version 2 against version 1 (Options.NoTensorCores) on longer sequences at K3's
// head sizes, where each output sums thousands of keys: the same bound as against the CPU backend.
func TestMLAVersionsAgree(t *testing.T) {
	tc := newBackendWith(t, cuda.Options{Precision: ops.BF16, Sync: true})
	cc := newBackendWith(t, cuda.Options{Precision: ops.BF16, Sync: true, NoTensorCores: true})
	rng := rand.New(rand.NewPCG(11, 12))
	c := mlaCase{8, 128, 64, 128, []int{1000, 37, 2100}, 1}
	n, total, rel, d2, d1 := mlaOnBoth(t, tc, cc, c, rng)
	t.Logf("%s: version 2 (%v) vs version 1 (%v): %d of %d values differ, max rel diff %.3g", c, d2, d1, n, total, rel)
	if float64(n) > 0.05*float64(total) || rel > 4.0/64 {
		t.Errorf("%s: %d of %d values differ (at most 5%% may), max rel diff %.3g (at most %.3g)", c, n, total, rel, 4.0/64)
	}
}

// TestMLABatchInvarianceTC: a 1000-row sequence (16 query tiles, up to 16 key blocks) alone and at row
// 100 of a wave (not a multiple of the 64-row tile) gives the same bits, with each kernel (mlaKernels).
func TestMLABatchInvarianceTC(t *testing.T) {
	for _, k := range mlaKernels {
		t.Run(k.name, func(t *testing.T) {
			b := newBackendWith(t, k.opts(cuda.Options{Precision: ops.BF16, Sync: true}))
			rng := rand.New(rand.NewPCG(13, 14))
			const heads, first, n = 3, 100, 1000
			lens := []int{first, n, 64, 7}
			wave := mlaCase{heads, 128, 64, 128, lens, 1}.layout()
			alone := ops.Layout{Starts: []int{0, n}}
			rows := wave.Tokens()
			mk := func(cols int) (ops.Tensor, ops.Tensor) {
				v := make([]float32, rows*cols)
				for i := range v {
					v[i] = float32(rng.NormFloat64())
				}
				w, err := b.FromHost(rows, cols, v)
				if err != nil {
					t.Fatal(err)
				}
				a, err := b.FromHost(n, cols, v[first*cols:(first+n)*cols])
				if err != nil {
					t.Fatal(err)
				}
				return w, a
			}
			qw, qa := mk(heads * 192)
			kvw, kva := mk(heads * 256)
			ksw, ksa := mk(64)
			yw, err := b.MLA(qw, kvw, ksw, heads, 128, 64, 128, wave)
			if err != nil {
				t.Fatal(err)
			}
			ya, err := b.MLA(qa, kva, ksa, heads, 128, 64, 128, alone)
			if err != nil {
				t.Fatal(err)
			}
			wv, err := b.ToHost(yw)
			if err != nil {
				t.Fatal(err)
			}
			av, err := b.ToHost(ya)
			if err != nil {
				t.Fatal(err)
			}
			cols := heads * 128
			for i, x := range av {
				if math.Float32bits(x) != math.Float32bits(wv[first*cols+i]) {
					t.Fatalf("row %d col %d: alone %g, at row %d of the wave %g", i/cols, i%cols, x, first, wv[first*cols+i])
				}
			}
			t.Logf("MLA (%s): the %d-row sequence is bit-identical alone and at row %d of a %d-row wave", k.name, n, first, rows)
		})
	}
}

// TestMLATiming times MLA at K3's sizes (96 heads, 128+64, v 128) on 1 x 1024, 4 x 4096 and 16 x 4096
// tokens on the device's tensor-core kernel and on mma.sync (where they differ), 64 x 4096 on the first,
// and version 1 on the smaller waves; skipped with -short. Inputs are made on the
// device (a MatMul of random rows by a random bf16 weight) to keep the host out of the lease. FLOPs are
// the causal count: per sequence, sum over t of (t+1) x heads x (192 + 128) x 2.
func TestMLATiming(t *testing.T) {
	if testing.Short() {
		t.Skip("timing: not with -short")
	}
	const heads = 96
	tc := newBackendWith(t, cuda.Options{Precision: ops.BF16})
	ms := newBackendWith(t, cuda.Options{Precision: ops.BF16, MLAMmaSync: true})
	cc := newBackendWith(t, cuda.Options{Precision: ops.BF16, NoTensorCores: true})
	rng := rand.New(rand.NewPCG(21, 22))
	// gen returns a rows x cols activation: random rows of 64 times a random 64-wide bf16 weight
	gen := func(b *cuda.Backend, rows, cols int) ops.Tensor {
		xv := make([]float32, rows*64)
		for i := range xv {
			xv[i] = float32(rng.NormFloat64())
		}
		x, err := b.FromHost(rows, 64, xv)
		if err != nil {
			t.Fatal(err)
		}
		wv := make([]float32, cols*64)
		for i := range wv {
			wv[i] = float32(rng.NormFloat64() / 8)
		}
		raw := make([]byte, 2*len(wv))
		bf16.Encode(raw, wv)
		w, err := b.Upload(ops.WeightBF16, cols, 64, raw)
		if err != nil {
			t.Fatal(err)
		}
		y, err := b.MatMul(x, w)
		if err != nil {
			t.Fatal(err)
		}
		b.Free(x)
		b.Free(w)
		return y
	}
	run := func(b *cuda.Backend, what string, seqs, T, reps int) {
		l := mlaCase{heads, 128, 64, 128, nil, 1}
		for range seqs {
			l.lens = append(l.lens, T)
		}
		lay := l.layout()
		rows := lay.Tokens()
		q, kv, ks := gen(b, rows, heads*192), gen(b, rows, heads*256), gen(b, rows, 64)
		defer b.Free(q)
		defer b.Free(kv)
		defer b.Free(ks)
		flop := float64(seqs) * float64(T) * float64(T+1) / 2 * heads * 320 * 2
		call := func() {
			y, err := b.MLA(q, kv, ks, heads, 128, 64, 128, lay)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if err := b.Synchronize(); err != nil {
				t.Fatal(err)
			}
			b.Free(y)
		}
		call() // warm-up
		var ds []time.Duration
		for range reps {
			start := time.Now()
			call()
			ds = append(ds, time.Since(start))
		}
		for i := range ds {
			for j := i + 1; j < len(ds); j++ {
				if ds[j] < ds[i] {
					ds[i], ds[j] = ds[j], ds[i]
				}
			}
		}
		med := ds[len(ds)/2]
		t.Logf("TIMING MLA %-11s %2d x %4d tokens, 96 heads: %9.3f ms  %7.2f TFLOP/s (median of %d)", what, seqs, T,
			float64(med.Microseconds())/1e3, flop/med.Seconds()/1e12, reps)
	}
	def := "mma.sync"
	if tc.Device().Arch == "sm_90a" {
		def = "wgmma"
	}
	for _, v := range []struct {
		b    *cuda.Backend
		name string
	}{{tc, def}, {ms, "mma.sync"}} {
		if v.b == ms && def == "mma.sync" {
			continue // the same kernel as the default's
		}
		run(v.b, v.name, 1, 1024, 5)
		run(v.b, v.name, 4, 4096, 5)
		run(v.b, v.name, 16, 4096, 5)
	}
	// the k3-layer bench's 262,144-token wave as one launch (its op profile's MLA adds the slices' carries)
	run(tc, def, 64, 4096, 3)
	run(cc, "version 1", 1, 1024, 5)
	run(cc, "version 1", 4, 4096, 1)
}
