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

// TestBatchInvarianceLarge: opstest checks batch invariance on small waves; this repeats it where the
// kernels tile: a sequence alone vs at an unaligned offset of a wave of several tiles (MatMul's 64-row
// tiles, MLA's 16-query tiles and 32-key chunks, KDA's per-sequence blocks).
func TestBatchInvarianceLarge(t *testing.T) {
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		t.Run(prec.String(), func(t *testing.T) {
			b := newBackend(t, prec)
			rng := rand.New(rand.NewPCG(3, 4))
			lens := []int{37, 300, 1, 129} // the sequence under test is the 300-row one, from row 37
			rows := 0
			for _, n := range lens {
				rows += n
			}
			starts := []int{0}
			for _, n := range lens {
				starts = append(starts, starts[len(starts)-1]+n)
			}
			wave := ops.Layout{Starts: starts}
			alone := ops.Layout{Starts: []int{0, 300}}
			const first = 37
			mk := func(cols int, scale float64) ([]float32, ops.Tensor, ops.Tensor) {
				v := make([]float32, rows*cols)
				for i := range v {
					v[i] = float32(scale * rng.NormFloat64())
				}
				w, err := b.FromHost(rows, cols, v)
				if err != nil {
					t.Fatal(err)
				}
				a, err := b.FromHost(300, cols, v[first*cols:(first+300)*cols])
				if err != nil {
					t.Fatal(err)
				}
				return v, w, a
			}
			check := func(what string, w, a ops.Tensor, err1, err2 error) {
				t.Helper()
				if err1 != nil || err2 != nil {
					t.Fatalf("%s: %v, %v", what, err1, err2)
				}
				wv, err := b.ToHost(w)
				if err != nil {
					t.Fatal(err)
				}
				av, err := b.ToHost(a)
				if err != nil {
					t.Fatal(err)
				}
				cols := a.Cols()
				for i, x := range av {
					if math.Float32bits(x) != math.Float32bits(wv[first*cols+i]) {
						t.Errorf("%s: row %d col %d: alone %g, in the wave %g", what, i/cols, i%cols, x, wv[first*cols+i])
						return
					}
				}
				t.Logf("%s: the 300-row sequence is bit-identical alone and at row %d of a %d-row wave", what, first, rows)
				b.Free(w)
				b.Free(a)
			}
			wraw := make([]byte, 2*200*512)
			wv := make([]float32, 200*512)
			for i := range wv {
				wv[i] = float32(0.05 * rng.NormFloat64())
			}
			bf16.Encode(wraw, wv)
			w, err := b.Upload(ops.WeightBF16, 200, 512, wraw)
			if err != nil {
				t.Fatal(err)
			}
			_, xw, xa := mk(512, 1)
			yw, e1 := b.MatMul(xw, w)
			ya, e2 := b.MatMul(xa, w)
			check("MatMul 512 -> 200", yw, ya, e1, e2)

			_, qw, qa := mk(2*192, 1)
			_, kvw, kva := mk(2*256, 1)
			_, ksw, ksa := mk(64, 1)
			mw, e1 := b.MLA(qw, kvw, ksw, 2, 128, 64, 128, wave)
			ma, e2 := b.MLA(qa, kva, ksa, 2, 128, 64, 128, alone)
			check("MLA", mw, ma, e1, e2)

			var kw, ka [5]ops.Tensor
			for i, cols := range []int{256, 256, 256, 256, 2} {
				_, kw[i], ka[i] = mk(cols, 1)
			}
			aLog, err := b.FromHost(1, 2, []float32{0.3, -0.2})
			if err != nil {
				t.Fatal(err)
			}
			dtv := make([]float32, 256)
			for i := range dtv {
				dtv[i] = float32(0.5 * rng.NormFloat64())
			}
			dt, err := b.FromHost(1, 256, dtv)
			if err != nil {
				t.Fatal(err)
			}
			ow, e1 := b.KDA(kw[0], kw[1], kw[2], kw[3], kw[4], aLog, dt, 2, -5, wave)
			oa, e2 := b.KDA(ka[0], ka[1], ka[2], ka[3], ka[4], aLog, dt, 2, -5, alone)
			check("KDA", ow, oa, e1, e2)

			// TokenStats: one row chunk here (chunks hold 1 GiB of logits); rows across chunks are
			// TestTokenStatsK3/ChunkInvariance's
			const vocab = 40000
			lraw := make([]byte, 2*vocab*64)
			lv := make([]float32, vocab*64)
			for i := range lv {
				lv[i] = float32(0.3 * rng.NormFloat64())
			}
			bf16.Encode(lraw, lv)
			lm, err := b.Upload(ops.WeightBF16, vocab, 64, lraw)
			if err != nil {
				t.Fatal(err)
			}
			_, hw, ha := mk(64, 1)
			targets := make([]int32, rows)
			for i := range targets {
				targets[i] = int32(rng.IntN(vocab))
			}
			sw, e1 := b.TokenStats(hw, lm, targets, 10)
			sa, e2 := b.TokenStats(ha, lm, targets[first:first+300], 10)
			if e1 != nil || e2 != nil {
				t.Fatalf("TokenStats: %v, %v", e1, e2)
			}
			for i := range sa {
				if fmt.Sprint(sa[i]) != fmt.Sprint(sw[first+i]) {
					t.Fatalf("TokenStats row %d: alone %v, in the wave %v", i, sa[i], sw[first+i])
				}
			}
			t.Logf("TokenStats over %d words: the sequence's %d rows are identical alone and in the %d-row wave", vocab, len(sa), rows)
		})
	}
}

// TestTiming times MatMul, KDA, MLA, TokenStats and a routed expert at K3 sizes (skipped with -short).
// Each figure is the median of 5 runs after a warm-up, host-timed around a device synchronisation.
func TestTiming(t *testing.T) {
	if testing.Short() {
		t.Skip("timing: not with -short")
	}
	if err := cuda.Available(); err != nil {
		t.Skipf("CUDA backend not available on this machine: %v", err)
	}
	b, err := cuda.New(cuda.Options{Precision: ops.BF16})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	pool := make([]float32, 1<<20+7) // random values, repeated with an odd period: K3-sized inputs stay cheap to make
	for i := range pool {
		pool[i] = float32(rng.NormFloat64())
	}
	fill := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(scale) * pool[i%len(pool)]
		}
		return v
	}
	act := func(rows, cols int, scale float64) ops.Tensor {
		v := fill(rows*cols, scale)
		x, err := b.FromHost(rows, cols, v)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	weight := func(rows, cols int, scale float64) ops.Tensor { // raw bf16 bytes, a random block repeated
		block := make([]byte, 2*len(pool))
		bf16.Encode(block, fill(len(pool), scale))
		raw := make([]byte, 2*rows*cols)
		for off := 0; off < len(raw); off += copy(raw[off:], block) {
		}
		w, err := b.Upload(ops.WeightBF16, rows, cols, raw)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	timeIt := func(what string, flop float64, fn func() error) {
		if err := fn(); err != nil { // warm-up
			t.Fatalf("%s: %v", what, err)
		}
		if err := b.Synchronize(); err != nil {
			t.Fatal(err)
		}
		var ds []time.Duration
		for range 5 {
			start := time.Now()
			if err := fn(); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if err := b.Synchronize(); err != nil {
				t.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		for i := range ds { // sort 5 values
			for j := i + 1; j < len(ds); j++ {
				if ds[j] < ds[i] {
					ds[i], ds[j] = ds[j], ds[i]
				}
			}
		}
		med := ds[2]
		t.Logf("TIMING %-58s %9.3f ms  %8.2f TFLOP/s", what, float64(med.Microseconds())/1e3, flop/med.Seconds()/1e12)
	}
	free := func(x ops.Tensor, err error) error {
		b.Free(x)
		return err
	}

	x, w := act(4096, 7168, 1), weight(7168, 7168, 0.01)
	timeIt("MatMul 4096x7168 by 7168x7168 (bf16 weight, tensor cores)", 2*4096*7168*7168, func() error { return free(b.MatMul(x, w)) })
	x1 := act(1, 7168, 1)
	timeIt("MatMul 1x7168 by 7168x7168 (tensor cores)", 2*7168*7168, func() error { return free(b.MatMul(x1, w)) })
	b.Free(x)
	b.Free(w)
	x, w = act(8192, 7168, 1), weight(12288, 7168, 0.01)
	timeIt("MatMul 8192x7168 by 12288x7168 (K3's q_proj, tensor cores)", 2*8192*7168*12288, func() error { return free(b.MatMul(x, w)) })
	b.Free(x)
	b.Free(w)
	{ // the same on the CUDA cores (kernel version 1)
		b0 := b
		b, err = cuda.New(cuda.Options{Precision: ops.BF16, NoTensorCores: true})
		if err != nil {
			t.Fatal(err)
		}
		x, w, x1 := act(4096, 7168, 1), weight(7168, 7168, 0.01), act(1, 7168, 1)
		timeIt("MatMul 4096x7168 by 7168x7168 (bf16 weight, CUDA cores)", 2*4096*7168*7168, func() error { return free(b.MatMul(x, w)) })
		timeIt("MatMul 1x7168 by 7168x7168 (CUDA cores)", 2*7168*7168, func() error { return free(b.MatMul(x1, w)) })
		b.Close()
		b = b0
	}

	// 16 routed experts of K3's size (latent 3584, ffn 3072, MXFP4), 1024 rows choosing 4 of them each
	const latent, ffn, rows, chosen = 3584, 3072, 1024, 4
	var experts []ops.Expert
	for id := range 16 {
		var packed, scales [3][]byte
		for i := range 3 {
			r, c := ffn, latent
			if i == 2 {
				r, c = latent, ffn
			}
			packed[i], scales[i] = make([]byte, r*c/2), make([]byte, r*c/32)
			for j := range packed[i] {
				packed[i][j] = byte(j*131 + id*7 + j>>9)
			}
			for j := range scales[i] {
				scales[i][j] = byte(118 + (j+id)%4)
			}
		}
		e, err := b.UploadExpert(id, latent, ffn, packed[0], scales[0], packed[1], scales[1], packed[2], scales[2])
		if err != nil {
			t.Fatal(err)
		}
		experts = append(experts, e)
	}
	rt := ops.Routing{K: chosen, IDs: make([]int32, rows*chosen), Weights: make([]float32, rows*chosen)}
	for r := range rows {
		for j, e := range rng.Perm(16)[:chosen] {
			rt.IDs[r*chosen+j], rt.Weights[r*chosen+j] = int32(e), 0.25
		}
	}
	z, acc := act(rows, latent, 1), act(rows, latent, 0)
	timeIt("ExpertsAccumulate 16 MXFP4 experts (3584/3072), 1024 rows x 4", rows*chosen*3*2*latent*ffn, func() error {
		return b.ExpertsAccumulate(acc, z, rt, experts, 4, 25)
	})
	for _, e := range experts {
		b.Free(e)
	}
	b.Free(z)
	b.Free(acc)

	const T, H, D = 1024, 96, 128
	q, k, v, g := act(T, H*D, 1), act(T, H*D, 1), act(T, H*D, 1), act(T, H*D, 1)
	br, aLog, dt := act(T, H, 1), act(1, 128, 0.5), act(1, H*D, 0.5)
	one := ops.Layout{Starts: []int{0, T}}
	// flop: two passes over the d x d state per token and head, 4 flop per element
	timeIt("KDA 1 sequence x 1024 tokens, 96 heads of 128", 4*T*H*D*D, func() error {
		return free(b.KDA(q, k, v, g, br, aLog, dt, H, -5, one))
	})
	eight := ops.Layout{Starts: []int{0, 128, 256, 384, 512, 640, 768, 896, 1024}}
	timeIt("KDA 8 sequences x 128 tokens, 96 heads of 128", 4*T*H*D*D, func() error {
		return free(b.KDA(q, k, v, g, br, aLog, dt, H, -5, eight))
	})
	for _, x := range []ops.Tensor{q, k, v, g, br, aLog, dt} {
		b.Free(x)
	}

	mq, mkv, mks := act(T, H*192, 1), act(T, H*256, 1), act(T, 64, 1)
	// flop: causal, T^2/2 keys per head, (192 + 128) * 2 per key
	timeIt("MLA 1 sequence x 1024 tokens, 96 heads (128+64, v 128)", float64(T)*T/2*H*320*2, func() error {
		return free(b.MLA(mq, mkv, mks, H, 128, 64, 128, one))
	})
	b.Free(mq)
	b.Free(mkv)
	b.Free(mks)

	h, lm := act(256, 7168, 1), weight(163840, 7168, 0.01)
	targets := make([]int32, 256)
	for i := range targets {
		targets[i] = int32(rng.IntN(163840))
	}
	timeIt("TokenStats 256 rows x 163,840 vocab x 7168, top 5", 2*256*163840*7168, func() error {
		_, err := b.TokenStats(h, lm, targets, 5)
		return err
	})
	b.Free(h)
	b.Free(lm)
}
