package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestKDATiming times KDA's two kernels apart, in BF16 precision (k_kda_prep_fast, k_kda_fast_r128) and
// FP32 precision (k_kda_prep_exact, k_kda_exact_r128), at K3's sizes (96 heads of 128) for 16 x 4096,
// 4 x 4096 and 1 x 4096 tokens ($POTATO_KDA_SHAPES, e.g. "4x4096", picks others), with CUDA events
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
		"k_kda_exact_r64": 64, "k_kda_exact_r32": 32, "k_kda_fast_r128": 128, "k_kda_fast_r64": 64})
	runs := 5
	if s := os.Getenv("POTATO_KDA_RUNS"); s != "" {
		var err error
		if runs, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	shapes := "16x4096,4x4096,1x4096"
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
			pool[i] = float32(rng.NormFloat64())
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
		// the last 8 rows of every sequence (the end of each recurrence), both paths
		tail := min(8, n)
		for s := range seqs {
			var got [2][]float32
			for v := range paths {
				got[v] = make([]float32, tail*ch)
				off := uint64(4 * ((s+1)*n - tail) * ch)
				if err := download(c.b, got[v], out[v]+off); err != nil {
					return err
				}
			}
			df := diffKDA(got[0], got[1], true)
			if s == 0 || s == seqs-1 {
				t.Logf("KDA %d x %d tokens, sequence %d, last %d rows: fast against exact: %v", seqs, n, s, tail, df)
			}
			if df.maxFrac > 1 {
				i := df.worst
				return fmt.Errorf("sequence %d, row %d from its end, col %d: fast %g, exact %g: beyond the tolerance",
					s, tail-i/ch, i%ch, got[0][i], got[1][i])
			}
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
