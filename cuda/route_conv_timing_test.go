package cuda

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Timings at K3's sizes on a wave of 65,536 tokens (16 sequences of 4,096), skipped with -short: the
// router's selection (896 experts, k 16) and the short convolution (12,288 channels, 4 taps), each
// kernel version alone (CUDA events, median of 5 after a warm-up) and the op as the engine calls it
// (host-timed around a device synchronisation, median of 3).

// poolFill fills v with normals scaled by scale, repeating a pool of 2^20 + 7 values (fast for GBs).
func poolFill(rng *rand.Rand, v []float32, scale float64) {
	pool := make([]float32, 1<<20+7)
	for i := range pool {
		pool[i] = float32(scale * rng.NormFloat64())
	}
	for i := 0; i < len(v); i += len(pool) {
		copy(v[i:], pool)
	}
}

// TestRouteTiming: k_route_topk (version 1) against k_route_topk_v2 on 16,384 rows (Route's chunk) and
// 65,536 rows of 896 logits, then Route on 65,536 x 7,168 by 896 x 7,168 with k 16. Bytes: the logits
// read once (rows x 896 x 4) and the ids and weights written (rows x 16 x 8); version 1 also writes the
// logits back (not counted). Version 1 overwrites its logits with their sigmoids on every run, so its
// later runs select from other values (the same work: one insertion scan per row).
func TestRouteTiming(t *testing.T) {
	skipTiming(t)
	b := testBackend(t, Options{Precision: ops.BF16})
	logKernelAttrs(t, b, "k_route_topk", "k_route_topk_v2")
	const rows, experts, k, cols, scale = 65536, 896, 16, 7168, 2.5
	rng := rand.New(rand.NewPCG(9, 10))
	logits, bias := routeData(rng, "normal", rows, experts)
	err := b.run("route timing", func(c *opCtx) error {
		lp, err := uploadTemp(c, logits)
		if err != nil {
			return err
		}
		bp, err := uploadTemp(c, bias)
		if err != nil {
			return err
		}
		ip, err := c.temp(4 * rows * k)
		if err != nil {
			return err
		}
		wp, err := c.temp(4 * rows * k)
		if err != nil {
			return err
		}
		for _, n := range []int{routeChunk, rows} {
			bytes := float64(n) * (experts*4 + k*8)
			for _, v := range []int{1, 2} {
				ms, err := eventTime(c, 5, func() error { return c.routeTopK(v, ip, wp, lp, bp, n, experts, k, scale) })
				if err != nil {
					return err
				}
				t.Logf("TIMING route top-k version %d, %6d rows x %d experts, k %d: %8.3f ms %7.1f GB/s", v, n, experts, k, ms, bytes/ms/1e6)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	xv := make([]float32, rows*cols)
	poolFill(rng, xv, 1)
	x, err := b.FromHost(rows, cols, xv)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(x)
	wv := make([]float32, experts*cols)
	poolFill(rng, wv, 0.02)
	raw := make([]byte, 2*len(wv))
	bf16.Encode(raw, wv)
	w, err := b.Upload(ops.WeightBF16, experts, cols, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(w)
	braw := make([]byte, 4*experts)
	for e, v := range bias {
		binary.LittleEndian.PutUint32(braw[4*e:], math.Float32bits(v))
	}
	bt, err := b.Upload(ops.WeightF32, 1, experts, braw)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(bt)
	med := medianTime(t, b, 3, func() error { _, err := b.Route(x, w, bt, k, scale); return err })
	t.Logf("TIMING Route op %d x %d by %d x %d, k %d (logits on %s, top-k version 2, ids and weights to the host): %8.3f ms",
		rows, cols, experts, cols, k, map[bool]string{true: "cuBLASLt", false: "the matmul kernels"}[b.lt != nil], float64(med.Microseconds())/1e3)
}

// TestShortConvTiming: k_shortconv (any shape) against k_shortconv4 on 65,536 x 12,288
// with 4 taps over 16 sequences of 4,096 (both precisions' rounding: bf 1), the same bits at that size,
// then ShortConvSiLU there. Bytes: x read once and out written once, 2 x rows x ch x 4 (6.4 GB; the taps
// and row starts are noise); about 1.8 ms at the H200's ~3.5 TB/s.
func TestShortConvTiming(t *testing.T) {
	skipTiming(t)
	b := testBackend(t, Options{Precision: ops.BF16})
	logKernelAttrs(t, b, "k_shortconv", "k_shortconv4")
	const rows, ch, taps = 65536, 12288, 4
	rng := rand.New(rand.NewPCG(13, 14))
	xv := make([]float32, rows*ch)
	poolFill(rng, xv, 1)
	wv := make([]float32, ch*taps)
	poolFill(rng, wv, 0.5)
	x, err := b.FromHost(rows, ch, xv)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(x)
	w, err := b.FromHost(ch, taps, wv)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(w)
	lens := make([]int, 16)
	for i := range lens {
		lens[i] = rows / 16
	}
	start := rowStarts(lens)
	bytes := 2.0 * rows * ch * 4
	outs := make([][]float32, 2)
	err = b.run("shortconv timing", func(c *opCtx) error {
		sp, err := uploadTemp(c, start)
		if err != nil {
			return err
		}
		o1, err := c.temp(4 * rows * ch)
		if err != nil {
			return err
		}
		o2, err := c.temp(4 * rows * ch)
		if err != nil {
			return err
		}
		xp, wp := x.(*Tensor).ptr, w.(*Tensor).ptr
		run := func(form convForm, out uint64) func() error {
			return func() error { return shortConvKernel(c, form, out, xp, wp, sp, rows, ch, taps, 1) }
		}
		ms, err := eventTime(c, 5, run(convGeneral, o1))
		if err != nil {
			return err
		}
		t.Logf("TIMING shortconv %-18s %d x %d, 4 taps: %8.3f ms %7.1f GB/s", "k_shortconv", rows, ch, ms, bytes/ms/1e6)
		if ms, err = eventTime(c, 5, run(convLauncher, o2)); err != nil {
			return err
		}
		t.Logf("TIMING shortconv %-18s %d x %d, 4 taps: %8.3f ms %7.1f GB/s", "k_shortconv4", rows, ch, ms, bytes/ms/1e6)
		// ShortConvSiLU's form in BF16 precision: the bfloat16 copy alone
		o3, err := c.temp(2 * rows * ch)
		if err != nil {
			return err
		}
		if ms, err = eventTime(c, 5, func() error {
			return c.launch("k_shortconv4n", shortConv4Grid(rows, ch), d1(ewThreads), 0,
				uint64(0), xp, wp, sp, int64(rows), int32(ch), int32(1), o3)
		}); err != nil {
			return err
		}
		t.Logf("TIMING shortconv %-18s %d x %d, 4 taps: %8.3f ms %7.1f GB/s (bfloat16 out)", "k_shortconv4n", rows, ch, ms, 1.5*rows*ch*4/ms/1e6)
		for i, p := range []uint64{o1, o2} {
			outs[i] = make([]float32, rows*ch)
			if err := download(b, outs[i], p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sameBits(t, "k_shortconv4 vs k_shortconv at 65,536 x 12,288", outs[1], outs[0], ch)
	outs = nil
	l := ops.Layout{Starts: []int{0}}
	for _, n := range lens {
		l.Starts = append(l.Starts, l.Starts[len(l.Starts)-1]+n)
	}
	med := medianTime(t, b, 3, func() error {
		out, err := b.ShortConvSiLU(x, w, l)
		b.Free(out)
		return err
	})
	t.Logf("TIMING ShortConvSiLU op %d x %d, 4 taps, 16 sequences: %8.3f ms %7.1f GB/s", rows, ch, float64(med.Microseconds())/1e3, bytes/med.Seconds()/1e9)
}
