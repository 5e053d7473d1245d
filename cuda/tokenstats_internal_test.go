package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestStatsChunk checks the chunk rule without a GPU: within the byte bound (or one row), at most rows, a
// multiple of statsRowAlign when a chunk holds that many, and no more chunks than the bound (so aligned)
// requires.
func TestStatsChunk(t *testing.T) {
	for _, c := range []struct{ rows, vocab, bytes int }{
		{1, 163840, statsChunkBytes}, {100, 163840, statsChunkBytes}, {1537, 163840, statsChunkBytes},
		{4096, 163840, statsChunkBytes}, {16384, 163840, statsChunkBytes}, {65536, 163840, statsChunkBytes},
		{65536, 163840, 64 << 20}, {3, 1 << 30, 64 << 20}, {5000, 40000, 1 << 20}, {7, 0, 64 << 20},
	} {
		n := statsChunk(c.rows, c.vocab, c.bytes)
		most := max(1, c.bytes/(4*max(1, c.vocab)))
		if most >= statsRowAlign {
			most &^= statsRowAlign - 1
		}
		chunks := (c.rows + n - 1) / n
		if n < 1 || n > c.rows || n > most || chunks > (c.rows+most-1)/most ||
			(most >= statsRowAlign && n < c.rows && n%statsRowAlign != 0) {
			t.Errorf("statsChunk(%d rows, vocab %d, %d bytes) = %d rows (%d chunks; at most %d rows a chunk)", c.rows, c.vocab, c.bytes, n, chunks, most)
		}
	}
	if n := statsChunk(65536, 163840, statsChunkBytes); n != 1536 {
		t.Errorf("K3: %d rows a chunk, want 1536", n)
	}
}

// statsDiff returns the first row where a and b differ in any bit, or -1.
func statsDiff(a, b []ops.TokenStats) int {
	if len(a) != len(b) {
		return 0
	}
	same := func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) }
	for r := range a {
		x, y := a[r], b[r]
		if !same(x.Logprob, y.Logprob) || !same(x.Entropy, y.Entropy) || x.Rank != y.Rank ||
			!slices.Equal(x.TopIDs, y.TopIDs) || !slices.EqualFunc(x.TopLogp, y.TopLogp, same) {
			return r
		}
	}
	return -1
}

// TestTokenStatsChunks: TokenStats gives the same bits with its 1 GiB chunks, 1 MiB ones (many chunks)
// and chunks of one row, on each lm_head path (cuBLASLt with the logits rounded as k_token_stats reads
// them, the tensor-core kernel, the CUDA cores, FP32 precision: float32 logits, all four radix passes),
// for random logits, logits with many ties (small exact values), k above the block's 256 threads, k = 0
// and k = vocab. Agreement with the CPU backend is TestAgainstCPU's (compare_test.go) and the
// conformance suite's.
func TestTokenStatsChunks(t *testing.T) {
	for _, bc := range []struct {
		name string
		opts Options
	}{
		{"bf16 cuBLASLt", Options{Precision: ops.BF16}},
		{"bf16 tensor-core kernel", Options{Precision: ops.BF16, CuBLASLt: CuBLASLtOff}},
		{"bf16 CUDA cores", Options{Precision: ops.BF16, NoTensorCores: true}},
		{"fp32", Options{Precision: ops.FP32}},
	} {
		t.Run(bc.name, func(t *testing.T) {
			b := testBackend(t, bc.opts)
			rng := rand.New(rand.NewPCG(7, 8))
			mk := func(rows, cols int, val func() float32, weight bool) ops.Tensor {
				v := make([]float32, rows*cols)
				for i := range v {
					v[i] = val()
				}
				var x ops.Tensor
				var err error
				if weight {
					raw := make([]byte, 2*len(v))
					bf16.Encode(raw, v)
					x, err = b.Upload(ops.WeightBF16, rows, cols, raw)
				} else {
					bf16.RoundSlice(v)
					x, err = b.FromHost(rows, cols, v)
				}
				if err != nil {
					t.Fatal(err)
				}
				return x
			}
			normal := func(s float64) func() float32 { return func() float32 { return float32(s * rng.NormFloat64()) } }
			small := func(vals ...float32) func() float32 { return func() float32 { return vals[rng.IntN(len(vals))] } }
			cases := []struct {
				what              string
				rows, cols, vocab int
				ks                []int
				h, w              func() float32
			}{
				{"random", 2000, 64, 40000, []int{10, 0}, normal(1), normal(0.3)},
				{"ties", 300, 8, 5000, []int{300, 1}, small(-1, 0, 1, 2), small(0, 0.25, -0.5, 1)},
				{"k = vocab", 3, 8, 3000, []int{3000}, small(-1, 0, 1), small(0, 0.25, -0.5)},
			}
			for _, c := range cases {
				h, w := mk(c.rows, c.cols, c.h, false), mk(c.vocab, c.cols, c.w, true)
				targets := make([]int32, c.rows)
				for i := range targets {
					targets[i] = int32(rng.IntN(c.vocab))
				}
				targets[c.rows/2] = -1
				for _, k := range c.ks {
					want, err := b.tokenStats(h, w, targets, k, 1)
					if err != nil {
						t.Fatalf("%s, k %d, one-row chunks: %v", c.what, k, err)
					}
					for _, chunkBytes := range []int{statsChunkBytes, 1 << 20} {
						got, err := b.tokenStats(h, w, targets, k, chunkBytes)
						if err != nil {
							t.Fatalf("%s, k %d, chunks of %d bytes: %v", c.what, k, chunkBytes, err)
						}
						if r := statsDiff(want, got); r >= 0 {
							t.Errorf("%s, k %d, chunks of %d bytes: row %d: %+v; in one-row chunks %+v", c.what, k, chunkBytes, r, got[r], want[r])
						}
					}
				}
				t.Logf("%s: %d rows x %d words, k %v: every chunking gives the same bits", c.what, c.rows, c.vocab, c.ks)
				b.Free(h)
				b.Free(w)
			}
		})
	}
}

// k3Inputs are K3-sized readout inputs: the lm_head (163,840 x 7168 bfloat16) and h rows (float32
// holding bfloat16 values), a block of random values repeated with an odd period so they are cheap to
// make.
type k3Inputs struct {
	lm ops.Tensor
	hv []float32
}

const k3Vocab, k3Hidden = 163840, 7168

func makeK3Inputs(t *testing.T, b *Backend, rows int) k3Inputs {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 4))
	pool := make([]float32, 1<<20+7)
	for i := range pool {
		pool[i] = bf16.Round(float32(rng.NormFloat64()))
	}
	repeat := func(dst []float32, scale float32) {
		n := copy(dst, pool)
		for i := range n {
			dst[i] *= scale
		}
		for n < len(dst) {
			n += copy(dst[n:], dst[:n])
		}
	}
	wv := make([]float32, len(pool))
	repeat(wv, 1.0/64)
	block := make([]byte, 2*len(wv))
	bf16.Encode(block, wv)
	raw := make([]byte, 2*k3Vocab*k3Hidden)
	for n := copy(raw, block); n < len(raw); n += copy(raw[n:], raw[:n]) {
	}
	lm, err := b.Upload(ops.WeightBF16, k3Vocab, k3Hidden, raw)
	if err != nil {
		t.Fatal(err)
	}
	hv := make([]float32, rows*k3Hidden)
	repeat(hv, 1)
	return k3Inputs{lm: lm, hv: hv}
}

// k3Targets returns random targets for rows rows, every 97th none.
func k3Targets(rows int) []int32 {
	rng := rand.New(rand.NewPCG(5, 6))
	targets := make([]int32, rows)
	for i := range targets {
		targets[i] = int32(rng.IntN(k3Vocab))
		if i%97 == 50 {
			targets[i] = -1
		}
	}
	return targets
}

// TestTokenStatsK3: at K3's sizes (163,840 words, hidden 7168, the lm_head on cuBLASLt) a row's stats are
// bit-identical whether its call has 1 row, 300 rows straddling a chunk boundary, or 4,000 rows (three
// chunks of up to 1,536 rows; and 40 chunks of 102 rows, the 64 MiB chunks used before), and then
// (skipped with -short) the TIMING of 4,096, 16,384 and 65,536 rows with 64 MiB and 1 GiB chunks, split
// into the lm_head GEMM and the stats kernel, with the two chunkings' results compared bit for bit.
// statsOldChunk is the chunk bound TokenStats had before its 1 GiB chunks: 64 MiB of logits (102 K3 rows).
const statsOldChunk = 64 << 20

func TestTokenStatsK3(t *testing.T) {
	b := testBackend(t, Options{Precision: ops.BF16})
	logKernelAttrs(t, b, "k_token_stats")
	const most = 65536
	in := makeK3Inputs(t, b, most)
	defer b.Free(in.lm)
	targets := k3Targets(most)
	const k = 5
	hOf := func(rows int) ops.Tensor {
		h, err := b.FromHost(rows, k3Hidden, in.hv[:rows*k3Hidden])
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	t.Run("ChunkInvariance", func(t *testing.T) {
		const rows = 4000
		h := hOf(rows)
		defer b.Free(h)
		all, err := b.TokenStats(h, in.lm, targets[:rows], k)
		if err != nil {
			t.Fatal(err)
		}
		if r := statsDiff(all[:rows-1], all[1:]); r < 0 {
			t.Fatalf("every row's stats equal the next row's: the inputs do not tell rows apart")
		}
		old, err := b.tokenStats(h, in.lm, targets[:rows], k, statsOldChunk)
		if err != nil {
			t.Fatal(err)
		}
		if r := statsDiff(all, old); r >= 0 {
			t.Errorf("row %d: %+v; in 102-row chunks %+v", r, all[r], old[r])
		}
		chunk := statsChunk(rows, k3Vocab, statsChunkBytes)
		checkPart := func(from, n int) {
			hv := in.hv[from*k3Hidden : (from+n)*k3Hidden]
			hp, err := b.FromHost(n, k3Hidden, hv)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free(hp)
			part, err := b.TokenStats(hp, in.lm, targets[from:from+n], k)
			if err != nil {
				t.Fatal(err)
			}
			if r := statsDiff(part, all[from:from+n]); r >= 0 {
				t.Errorf("row %d in a call of %d rows from %d: %+v; in the %d-row call %+v", from+r, n, from, part[r], rows, all[from+r])
			}
		}
		for _, r := range []int{0, 1, chunk - 1, chunk, chunk + 1, 2*chunk - 1, 2 * chunk, rows - 1} {
			checkPart(r, 1)
		}
		checkPart(chunk-150, 300)
		t.Logf("%d rows x %d words (chunks of %d rows): 9 rows alone, 300 rows across a chunk boundary and 102-row chunks give the same bits",
			rows, k3Vocab, chunk)
	})
	t.Run("Timing", func(t *testing.T) {
		skipTiming(t)
		for _, rows := range []int{4096, 16384, 65536} {
			h := hOf(rows)
			var res [2][]ops.TokenStats
			for i, chunkBytes := range []int{statsOldChunk, statsChunkBytes} {
				runs := 3
				if rows == 65536 {
					runs = 2
				}
				var ms []float64
				for range runs + 1 { // the first is a warm-up
					start := time.Now()
					st, err := b.tokenStats(h, in.lm, targets[:rows], k, chunkBytes)
					if err != nil {
						t.Fatal(err)
					}
					ms = append(ms, float64(time.Since(start).Microseconds())/1e3)
					res[i] = st
				}
				ms = ms[1:]
				slices.Sort(ms)
				gemm, kern, err := timeStatsParts(b, h, in.lm, targets[:rows], k, chunkBytes, runs)
				if err != nil {
					t.Fatal(err)
				}
				chunk := statsChunk(rows, k3Vocab, chunkBytes)
				flop := 2 * float64(rows) * k3Vocab * k3Hidden
				t.Logf("TIMING TokenStats %5d rows x 163,840 x 7168, top %d, chunks of %4d rows (%3d): %8.1f ms (%5.1f TFLOP/s); lm_head GEMM %8.1f ms (%5.1f TFLOP/s), stats kernel %7.1f ms",
					rows, k, chunk, (rows+chunk-1)/chunk, ms[len(ms)/2], flop/ms[len(ms)/2]/1e9, gemm, flop/gemm/1e9, kern)
			}
			if r := statsDiff(res[0], res[1]); r >= 0 {
				t.Errorf("%d rows: row %d: 1 GiB chunks %+v; 64 MiB chunks %+v", rows, r, res[1][r], res[0][r])
			}
			b.Free(h)
		}
	})
}

// timeStatsParts returns the device time in ms (median of runs, CUDA events) of TokenStats' two parts
// over all rows of h in chunks of at most chunkBytes bytes of logits: the lm_head GEMMs of every chunk,
// then k_token_stats over every chunk (each reading the last chunk's logits).
func timeStatsParts(b *Backend, h, w ops.Tensor, targets []int32, k int, chunkBytes int, runs int) (gemm, kern float64, err error) {
	ht, wt := h.(*Tensor), w.(*Tensor)
	rows, vocab := ht.rows, wt.rows
	chunk := statsChunk(rows, vocab, chunkBytes)
	err = b.run("TokenStats timing", func(c *opCtx) error {
		hp, err := c.f32(ht)
		if err != nil {
			return err
		}
		logits, err := c.temp(4 * chunk * vocab)
		if err != nil {
			return err
		}
		tg, err := uploadTemp(c, targets)
		if err != nil {
			return err
		}
		var outs [5]uint64
		for i, size := range []int{rows, rows, rows, rows * k, rows * k} {
			if outs[i], err = c.temp(4 * size); err != nil {
				return err
			}
		}
		var rd int32
		gemms := func() error {
			for r0 := 0; r0 < rows; r0 += chunk {
				if rd, err = c.statsLogits(logits, hp+uint64(4*r0*ht.cols), min(chunk, rows-r0), ht.cols, weightOf(wt)); err != nil {
					return err
				}
			}
			return nil
		}
		kernels := func() error {
			for r0 := 0; r0 < rows; r0 += chunk {
				o := [5]uint64{outs[0] + uint64(4*r0), outs[1] + uint64(4*r0), outs[2] + uint64(4*r0), outs[3] + uint64(4*r0*k), outs[4] + uint64(4*r0*k)}
				if err := c.statsKernel(o, logits, tg+uint64(4*r0), min(chunk, rows-r0), vocab, k, rd); err != nil {
					return err
				}
			}
			return nil
		}
		if gemm, err = eventTime(c, runs, gemms); err != nil {
			return fmt.Errorf("GEMMs: %w", err)
		}
		if kern, err = eventTime(c, runs, kernels); err != nil {
			return fmt.Errorf("kernels: %w", err)
		}
		return nil
	})
	return gemm, kern, err
}
