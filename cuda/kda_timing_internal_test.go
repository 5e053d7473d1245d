package cuda

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestKDATiming times KDA's two kernels apart, in BF16 precision (k_kda_prep_fast, k_kda_fast_r128) and
// FP32 precision (k_kda_prep_exact, k_kda_exact_r128), then the chunked kernel (k_kda_chunk_r128, prep
// included, and its clock profile by phase), at K3's sizes (96 heads of 128) for 16 x 4096,
// 4 x 4096, 1 x 4096 and 1 x 65,536 tokens ($POTATO_KDA_SHAPES, e.g. "4x4096", picks others), with CUDA events
// (median of $POTATO_KDA_RUNS runs, 5 by default, after a warm-up), checks on the last 8 rows of every
// sequence that the BF16 kernels are within kdaTol of the exact ones, and logs the kernels' registers and
// local memory (spills). Skipped with -short. The inputs are a block of random values repeated on the
// device (device-to-device copies), so K3-sized waves cost no host time. At 16 x 4096 the two paths hold
// about 36 GB of device memory (4 buffers of 3.2 GB a path, 4 inputs).
//
// Rates: the recurrence does 7 float32 operations per (token, head, state element): 3 for the decay and
// ks, 4 for the update and o (the fast kernel issues them as 4 instructions, three of them fused
// multiply-adds, and is counted at 7 too).
func TestKDATiming(t *testing.T) {
	skipTiming(t)
	b := testBackend(t, Options{Precision: ops.BF16})
	logKDAAttrs(t, b, map[string]int{"k_kda_prep_exact": 128, "k_kda_prep_fast": 128, "k_kda_exact_r128": 128,
		"k_kda_exact_r64": 64, "k_kda_exact_r32": 32, "k_kda_fast_r128": 128, "k_kda_fast_r64": 64,
		"k_kda_chunk_r128": 256, "k_kda_chunk_r64": 128})
	runs := 5
	if s := os.Getenv("POTATO_KDA_RUNS"); s != "" {
		var err error
		if runs, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	shapes := "16x4096,4x4096,1x4096,1x65536"
	if s := os.Getenv("POTATO_KDA_SHAPES"); s != "" {
		shapes = s
	}
	for _, sh := range strings.Split(shapes, ",") {
		var seqs, n int
		if _, err := fmt.Sscanf(sh, "%dx%d", &seqs, &n); err != nil {
			t.Fatalf("shape %q: %v", sh, err)
		}
		timeKDA(t, b, seqs, n, 96, 128, runs)
	}
}

// timeKDA times prep and recurrence of both paths (fast: BF16, exact: FP32) for seqs sequences of n tokens.
func timeKDA(t *testing.T, b *Backend, seqs, n, heads, d, runs int) {
	rows, ch := seqs*n, heads*d
	starts := make([]int32, seqs+1)
	for s := range starts {
		starts[s] = int32(s * n)
	}
	err := b.run("KDA timing", func(c *opCtx) error {
		rng := rand.New(rand.NewPCG(5, 6))
		pool := make([]float32, 1<<20+7)
		for i := range pool {
			// bfloat16 values, as the engine's activations: the chunked kernel rounds graw and braw
			// as it loads them (a deferred rounding, version 4b), the step kernels take them as given
			pool[i] = bf16.Round(float32(rng.NormFloat64()))
		}
		pp, err := uploadTemp(c, pool)
		if err != nil {
			return err
		}
		// fill returns a new buffer of m floats: the pool, then copies of the buffer's filled prefix
		fill := func(m int) (uint64, error) {
			p, err := c.temp(4 * m)
			if err != nil {
				return 0, err
			}
			d := c.b.drv
			done := min(m, len(pool))
			if err := d.Check("cuMemcpyDtoDAsync", bind.Call(d.CuMemcpyDtoDAsync, uintptr(p), uintptr(pp), uintptr(4*done), c.b.dv.Stream)); err != nil {
				return 0, err
			}
			for done < m {
				k := min(done, m-done)
				if err := d.Check("cuMemcpyDtoDAsync", bind.Call(d.CuMemcpyDtoDAsync, uintptr(p+uint64(4*done)), uintptr(p), uintptr(4*k), c.b.dv.Stream)); err != nil {
					return 0, err
				}
				done += k
			}
			return p, nil
		}
		var in [7]uint64
		for i, m := range []int{rows * ch, rows * ch, rows * ch, rows * ch, rows * heads, heads, ch} {
			if in[i], err = fill(m); err != nil {
				return err
			}
		}
		paths := []string{"fast", "exact"}
		var qn, kn, dec, beta, out [2]uint64
		for v := range paths {
			for _, p := range []*uint64{&qn[v], &kn[v], &dec[v], &out[v]} {
				if *p, err = c.temp(4 * rows * ch); err != nil {
					return err
				}
			}
			if beta[v], err = c.temp(4 * rows * heads); err != nil {
				return err
			}
		}
		sp, err := uploadTemp(c, starts)
		if err != nil {
			return err
		}
		scale := float32(1 / math.Sqrt(float64(d)))
		flop := 7 * float64(rows) * float64(heads) * float64(d) * float64(d)
		for v, path := range paths {
			fast := path == "fast"
			prep := func() error {
				return c.kdaPrep(fast, qn[v], kn[v], dec[v], beta[v], in[:], rows, heads, d, -5, scale)
			}
			rec := func() error {
				name, _ := kdaRecurrenceKernel(fast, d)
				return c.launch(name, d2(seqs, heads), d1(d), 0, out[v], qn[v], kn[v], dec[v], beta[v], in[2], sp, int32(heads), c.b.bf, uint64(0), uint64(0))
			}
			pms, err := eventTime(c, runs, prep)
			if err != nil {
				return err
			}
			rms, err := eventTime(c, runs, rec)
			if err != nil {
				return err
			}
			t.Logf("TIMING KDA %-5s %2d x %d tokens, %d heads of %d: prep %8.3f ms, recurrence %8.3f ms (%5.2f TFLOP/s), sum %8.3f ms",
				path, seqs, n, heads, d, pms, rms, flop/rms/1e9, pms+rms)
		}
		// the fast path checked against the exact one; then the chunked kernel (kda_chunk.cu: prep and
		// recurrence in one) writes into the fast path's output buffer
		if err := checkTails(t, c.b, "fast", out[0], out[1], seqs, n, ch); err != nil {
			return err
		}
		if d != 128 {
			return nil
		}
		if err := profileKDAChunk(t, c, out[0], in, sp, seqs, n, heads, d, scale); err != nil {
			return err
		}
		const name = "k_kda_chunk_r128"
		run := func() error {
			return c.launchKDAChunk(name, out[0], in[:], sp, seqs, heads, d, -5, scale, 0, 0, [5]uint64{}, 0)
		}
		ms, err := eventTime(c, runs, run)
		if err != nil {
			return err
		}
		t.Logf("TIMING KDA %-17s %2d x %d tokens, %d heads of %d: %8.3f ms (%5.2f TFLOP/s at the recurrence's count)",
			name, seqs, n, heads, d, ms, flop/ms/1e9)
		if err := logTailHash(t, c.b, name, out[0], seqs, n, ch); err != nil {
			return err
		}
		if err := checkTails(t, c.b, name, out[0], out[1], seqs, n, ch); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// logKDAAttrs logs the registers and local memory (spills) of kernels as the driver loaded them, and how
// many blocks of the given threads fit an SM by registers (64 Ki a multiprocessor, allocated per warp in
// units of 256; at most 32 blocks).
func logKDAAttrs(t *testing.T, b *Backend, threads map[string]int) {
	t.Helper()
	names := make([]string, 0, len(threads))
	for k := range threads {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		regs, local := kernelAttrs(t, b, k)
		perWarp := (int(regs)*32 + 255) / 256 * 256
		warps := (threads[k] + 31) / 32
		t.Logf("%-12s %3d registers, %3d bytes of local memory a thread: %2d blocks of %d threads an SM by registers",
			k, regs, local, min(32, 65536/(perWarp*warps)), threads[k])
	}
}

// checkTails compares the last 8 rows of every sequence of got (a BF16 kernel's output) with exact (the
// exact path's), logs the first and last sequences' comparison and fails beyond kdaTol.
func checkTails(t *testing.T, b *Backend, name string, got, exact uint64, seqs, n, ch int) error {
	tail := min(8, n)
	for s := range seqs {
		var v [2][]float32
		for i, p := range []uint64{got, exact} {
			v[i] = make([]float32, tail*ch)
			off := uint64(4 * ((s+1)*n - tail) * ch)
			if err := download(b, v[i], p+off); err != nil {
				return err
			}
		}
		df := diffKDA(v[0], v[1], true)
		if s == 0 || s == seqs-1 {
			t.Logf("KDA %d x %d tokens, sequence %d, last %d rows: %s against exact: %v", seqs, n, s, tail, name, df)
		}
		if df.maxFrac > 1 {
			i := df.worst
			return fmt.Errorf("%s: sequence %d, row %d from its end, col %d: %g, exact %g: beyond the tolerance",
				name, s, tail-i/ch, i%ch, v[0][i], v[1][i])
		}
	}
	return nil
}

// logTailHash logs an FNV-1a hash of the bits of the last 64 rows of every sequence of out (seqs
// sequences of n rows, ch columns): a kernel change meant to keep every bit is compared across builds
// by it (a sequence's last rows depend on all of its rows through the state).
func logTailHash(t *testing.T, b *Backend, name string, out uint64, seqs, n, ch int) error {
	tail := min(64, n)
	h := fnv.New64a()
	v := make([]float32, tail*ch)
	var buf [4]byte
	for s := range seqs {
		if err := download(b, v, out+uint64(4*((s+1)*n-tail)*ch)); err != nil {
			return err
		}
		for _, x := range v {
			binary.LittleEndian.PutUint32(buf[:], math.Float32bits(x))
			h.Write(buf[:])
		}
	}
	t.Logf("HASH KDA %s %d x %d tokens, the last %d rows of each sequence: %016x", name, seqs, n, tail, h.Sum64())
	return nil
}

// profileKDAChunk runs k_kda_chunk_prof_r128 once into out and logs the share of each phase in its blocks'
// clock cycles (thread 0 of each block, summed over blocks) and the cycles a chunk.
func profileKDAChunk(t *testing.T, c *opCtx, out uint64, in [7]uint64, sp uint64, seqs, n, heads, d int, scale float32) error {
	prof, err := uploadTemp(c, make([]int32, 16))
	if err != nil {
		return err
	}
	if err := c.launchKDAChunk("k_kda_chunk_prof_r128", out, in[:], sp, seqs, heads, d, -5, scale, 0, 0, [5]uint64{}, 0, prof); err != nil {
		return err
	}
	raw := make([]int32, 16)
	if err := download(c.b, raw, prof); err != nil {
		return err
	}
	var got [8]float64
	var sum float64
	for i := range got {
		got[i] = float64(uint64(uint32(raw[2*i])) | uint64(uint32(raw[2*i+1]))<<32)
		sum += got[i]
	}
	names := []string{"rows", "columns", "A and P", "M", "W", "products", "chunk barrier", "start"}
	var b strings.Builder
	for i, x := range got {
		fmt.Fprintf(&b, " %s %.1f%%", names[i], 100*x/max(sum, 1))
	}
	chunks := float64(seqs*heads) * float64((n+kdaChunkRows-1)/kdaChunkRows)
	t.Logf("PROFILE k_kda_chunk_prof_r128 %d x %d tokens, %d heads: %.0f cycles a chunk (thread 0 of a block);%s", seqs, n, heads, sum/chunks, b.String())
	return nil
}
