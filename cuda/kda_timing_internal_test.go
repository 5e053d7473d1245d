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

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestKDATiming times KDA's two kernels apart, versions 2 to 8 (7 the BF16 default; 6-8 kda_split), at
// K3's sizes (96 heads of 128) for 16 x 4096, 4 x 4096 and 1 x 4096 tokens ($POTATO_KDA_SHAPES, e.g.
// "4x4096", picks others), with CUDA events (median of $POTATO_KDA_RUNS runs, 5 by default, after a
// warm-up), checks on the last 8 rows of every sequence that versions 2 and 3
// agree bit for bit and versions 4-8 are within kdaV4Tol of version 3 (BF16 precision), and logs the
// kernels' registers and local memory (spills). Skipped with -short. The inputs are a block of random
// values repeated on the device (device-to-device copies), so K3-sized waves cost no host time. Seven
// versions at 16 x 4096 hold about 103 GB of device memory (4 buffers of 3.2 GB a version, 4 inputs).
//
// Rates: the recurrence does 7 float32 operations per (token, head, state element): 3 for the decay and
// ks, 4 for the update and o (version 2's two passes and version 3's merged pass alike; version 4 issues
// them as 4 instructions, three of them fused multiply-adds, and is counted at 7 too).
func TestKDATiming(t *testing.T) {
	skipTiming(t)
	b := testBackend(t, Options{Precision: ops.BF16})
	logKDAAttrs(t, b, map[string]int{"k_kda_prep": 128, "k_kda_prep3": 128, "k_kda_r128": 128, "k_kda3_r128": 128,
		"k_kda_r64": 64, "k_kda3_r64": 64, "k_kda_r32": 32, "k_kda3_r32": 32,
		"k_kda4_r128": 128, "k_kda4_r64": 64, "k_kda4_r32": 32, "k_kda_prep4": 128,
		"k_kda6_r128": 256, "k_kda6_r64": 128, "k_kda7_r128": 128, "k_kda7_r64": 64, "k_kda8_r128": 128, "k_kda8_r64": 64})
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

// timeKDA times prep and recurrence of versions 2 to 8 for seqs sequences of n tokens.
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
			if err := d.check("cuMemcpyDtoDAsync", ccall(d.cuMemcpyDtoDAsync, uintptr(p), uintptr(pp), uintptr(4*done), c.b.strm)); err != nil {
				return 0, err
			}
			for done < m {
				k := min(done, m-done)
				if err := d.check("cuMemcpyDtoDAsync", ccall(d.cuMemcpyDtoDAsync, uintptr(p+uint64(4*done)), uintptr(p), uintptr(4*k), c.b.strm)); err != nil {
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
		versions := []int{2, 3, 4, 5, 6, 7, 8}
		var qn, kn, dec, beta, out [7]uint64
		for v := range versions {
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
		for v, version := range versions {
			prep := func() error {
				return c.kdaPrep(version, qn[v], kn[v], dec[v], beta[v], in[:], rows, heads, d, -5, scale)
			}
			rec := func() error {
				return c.kdaRecurrence(version, out[v], qn[v], kn[v], dec[v], beta[v], in[2], sp, seqs, heads, d)
			}
			pms, err := eventTime(c, runs, prep)
			if err != nil {
				return err
			}
			rms, err := eventTime(c, runs, rec)
			if err != nil {
				return err
			}
			t.Logf("TIMING KDA version %d, %2d x %d tokens, %d heads of %d: prep %8.3f ms, recurrence %8.3f ms (%5.2f TFLOP/s), sum %8.3f ms",
				version, seqs, n, heads, d, pms, rms, flop/rms/1e9, pms+rms)
		}
		// the last 8 rows of every sequence (the end of each recurrence), every version
		tail := min(8, n)
		for s := range seqs {
			var got [7][]float32
			for v := range versions {
				got[v] = make([]float32, tail*ch)
				off := uint64(4 * ((s+1)*n - tail) * ch)
				if err := download(c.b, got[v], out[v]+off); err != nil {
					return err
				}
			}
			if i := firstDiff(got[0], got[1]); i >= 0 {
				return fmt.Errorf("sequence %d, row %d from its end, col %d: version 2 %g, version 3 %g", s, tail-i/ch, i%ch, got[0][i], got[1][i])
			}
			for v := 2; v < len(versions); v++ {
				df := diffKDA(got[v], got[1], c.b.bf == 1)
				if s == 0 || s == seqs-1 {
					t.Logf("KDA %d x %d tokens, sequence %d, last %d rows: version %d against 3: %v", seqs, n, s, tail, versions[v], df)
				}
				if df.maxFrac > 1 {
					i := df.worst
					return fmt.Errorf("sequence %d, row %d from its end, col %d: version %d %g, version 3 %g: beyond the tolerance",
						s, tail-i/ch, i%ch, versions[v], got[v][i], got[1][i])
				}
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
