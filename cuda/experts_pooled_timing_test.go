package cuda

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestExpertsPooledTiming times the cuBLASLt expert path at a pooled call's size (a 262,144-token wave of
// a pooled MoE layer: every slice's rows in one call, about 4,700 rows an expert) over its two schedule
// settings: the side streams the GEMMs spread over (lanes), the decode chunk (decodeBytes: how many
// experts one decode launch serves; the lanes wait for it at every chunk's start) and the rows of one GEMM
// block (expertRows). They change when and in what pieces the work runs, never its sums: each setting's result is checked bit for bit against the first. FLOP count
// as in TestExpertsGroupedTiming. Skipped with -short; about 75 GB of device memory.
func TestExpertsPooledTiming(t *testing.T) {
	skipTiming(t)
	b := testBackend(t, Options{Precision: ops.BF16})
	if b.lt == nil {
		t.Skip("cuBLASLt is not in use")
	}
	const latent, ffn, beta, linBeta = 3584, 3072, 4, 25
	const experts, rows, k = 896, 262144, 16
	rng := rand.New(rand.NewPCG(13, 14))
	es := k3Experts(t, b, rng, experts)
	rt := randRouting(rng, rows, k, experts, 0).Indexed()
	z := poolTensor(t, b, normalPool(rng), rows, latent)
	defer b.Free(z)
	flop := float64(rows) * k * 3 * 2 * latent * ffn
	slot := 2 * 3 * latent * ffn // decoded bytes an expert
	var want []float32
	defer func() { b.decodeBytes, b.expertRows, b.opts.ExpertStreams = 0, 0, 0 }()
	// run 56: 2 to 8 lanes and decode chunks of 16 to 64 experts all within 1% at blocks of 4,096 rows
	for _, c := range []struct{ lanes, chunk, block int }{
		{4, 16, 4096}, {4, 16, 8192}, {2, 16, 8192}, {8, 16, 8192}, {4, 64, 8192},
		// run 71: the call's GEMMs one after another on the compute stream ran at 748 TFLOP/s
		// (TestExpertsPhasesTiming): the compute stream alone, and two lanes, at blocks of 4,096
		{1, 16, 4096}, {2, 16, 4096},
	} {
		b.opts.ExpertStreams, b.decodeBytes, b.expertRows = c.lanes, slot*c.chunk, c.block
		acc, err := b.Zeros(rows, latent)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.expertsAccumulate(acc, z, rt, es, beta, linBeta, expertsLt); err != nil {
			t.Fatalf("%d lanes, chunks of %d: %v", c.lanes, c.chunk, err)
		}
		got, err := b.ToHost(acc)
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = got
		} else {
			sameBits(t, fmt.Sprintf("%d lanes, decode chunks of %d experts, blocks of %d rows", c.lanes, c.chunk, c.block), got, want, latent)
		}
		med := medianTime(t, b, 3, func() error { return b.expertsAccumulate(acc, z, rt, es, beta, linBeta, expertsLt) })
		t.Logf("TIMING pooled ExpertsAccumulate %d experts, %d tokens x %d: %d lanes, decode chunks of %2d experts, blocks of %d rows: %9.3f ms %7.1f TFLOP/s",
			experts, rows, k, c.lanes, c.chunk, c.block, float64(med.Microseconds())/1e3, flop/med.Seconds()/1e12)
		b.Free(acc)
	}
}

// TestExpertsLtGemmRate times the cuBLASLt path's two expert GEMMs alone (the pinned algorithms, bfloat16
// outputs) at the row counts a pooled call gives them (the ~600-row rest of a
// ~4,700-row expert in blocks of 4,096, middle sizes, the expert whole), and the SiTU pass between them
// (the element form and the eight-column form the path runs), on the compute stream: what the
// whole call's rate in TestExpertsPooledTiming is measured against. The operands are whatever the pool
// holds (the rate does not depend on the values). Skipped with -short.
func TestExpertsLtGemmRate(t *testing.T) {
	skipTiming(t)
	b := testBackend(t, Options{Precision: ops.BF16})
	if b.lt == nil {
		t.Skip("cuBLASLt is not in use")
	}
	const latent, ffn = 3584, 3072
	err := b.run("timing", func(c *opCtx) error {
		gu, dn, why, err := c.ltExpertShapes(latent, ffn)
		if err != nil || why != "" {
			return fmt.Errorf("expert shapes: %v %s", err, why)
		}
		const most = 8192
		zs, err1 := c.temp(2 * most * latent)
		gub, err2 := c.temp(2 * most * 2 * ffn)
		h, err3 := c.temp(2 * most * ffn)
		w, err4 := c.temp(2 * 3 * latent * ffn)
		situ, err5 := c.temp(4 * 2 * 65536)
		if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
			return err
		}
		for _, n := range []int{604, 2048, 4096, 4700, most} {
			steps := []struct {
				what string
				flop float64
				fn   func() error
			}{
				{"gate/up GEMM", 2 * float64(n) * latent * 2 * ffn, func() error { return c.ltGemm(gu, gub, zs, w, n, 2*ffn, latent) }},
				{"SiTU elements", 0, func() error {
					return c.launch1D("k_experts_situ_rows", n*ffn, h, gub, int64(n), int32(ffn), situ)
				}},
				{"SiTU pass", 0, func() error { return c.situRows(h, gub, n, ffn, situ) }},
				{"down GEMM", 2 * float64(n) * latent * ffn, func() error {
					return c.ltGemm(dn, zs, h, w+uint64(2*2*ffn*latent), n, latent, ffn)
				}},
			}
			for _, s := range steps {
				ms, err := eventTime(c, 10, s.fn)
				if err != nil {
					return fmt.Errorf("%s, %d rows: %w", s.what, n, err)
				}
				rate := fmt.Sprintf("%6.1f GB/s", float64(n)*float64(2*2*ffn+2*ffn)/ms/1e6)
				if s.flop > 0 {
					rate = fmt.Sprintf("%6.1f TFLOP/s", s.flop/ms/1e9)
				}
				t.Logf("TIMING expert on cuBLASLt, %4d rows: %-13s %8.4f ms %s", n, s.what, ms, rate)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
