package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/ops/opstest"
)

// newLtBackend makes a BF16 backend that must use cuBLASLt, or skips the test saying what is missing.
func newLtBackend(t testing.TB, sync bool) *Backend {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("CUDA backend not available on this machine: %v", err)
	}
	b, err := New(Options{Precision: ops.BF16, Sync: sync, CuBLASLt: CuBLASLtRequire})
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("cuBLASLt not available (the backend runs its own tensor-core kernel without it): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	t.Logf("cuBLASLt %s (%s) on %s", b.info.CuBLASLtVersion, b.info.CuBLASLt, b.info.Name)
	return b
}

// ltPlan returns the plan of a weight shape (made on the CUDA thread).
func ltPlan(t testing.TB, b *Backend, m, k int) *ltShape {
	t.Helper()
	var s *ltShape
	if err := b.run("plan", func(*opCtx) error {
		var err error
		s, err = b.lt.shape(m, k)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCuBLASLtPlans logs the pinned algorithm of K3's dense shapes (and a few odd ones), or why a shape
// stays on the project's kernel. K3's projections must have one.
func TestCuBLASLtPlans(t *testing.T) {
	b := newLtBackend(t, false)
	for _, c := range []struct {
		m, k int
		k3   bool
	}{
		{12288, 7168, true}, {7168, 12288, true}, {3584, 7168, true}, {7168, 3584, true},
		{7168, 7168, true}, {163840, 7168, true}, // lm_head (TokenStats)
		{6144, 3584, true}, {3584, 3072, true}, // routed experts: gate and up together, down (experts_lt.go)
		{131, 1001, false}, {67, 1100, false}, {300, 7168, false}, {129, 64, false}, {1, 7, false},
	} {
		start := time.Now()
		s := ltPlan(t, b, c.m, c.k)
		if s.ok {
			t.Logf("%dx%d weight: pinned in %v: %v", c.m, c.k, time.Since(start).Round(time.Microsecond), s.config)
		} else {
			t.Logf("%dx%d weight: the project's tensor-core kernel: %s", c.m, c.k, s.why)
			if c.k3 {
				t.Errorf("%dx%d (a K3 shape): no pinned cuBLASLt algorithm: %s", c.m, c.k, s.why)
			}
		}
	}
	// what the heuristic offers at 12288x7168, n=4096, with the workspace a plan allows and with NVIDIA's
	// recommended 32 MiB for Hopper (where split-K and other schedules that need workspace may come first)
	s := ltPlan(t, b, 12288, 7168)
	for _, ws := range []uint64{ltMaxWorkspace, 32 << 20} {
		var lines []string
		err := b.run("heuristic", func(*opCtx) error {
			res, masked, err := b.lt.heuristic(s, 12288, 7168, ws)
			for i := range res {
				cfg, derr := b.lt.describe(&res[i].Algo)
				lines = append(lines, fmt.Sprintf("  %2d: %v; workspace %d bytes, waves %.2f, state %d (%v)", i+1, cfg, res[i].Workspace, res[i].Waves, res[i].State, derr))
			}
			lines = append(lines, fmt.Sprintf("  (filtered by the reduction mask NONE: %v)", masked))
			return err
		})
		if err != nil {
			t.Errorf("heuristic with %d bytes of workspace: %v", ws, err)
		}
		t.Logf("12288x7168 at n=%d, workspace up to %d bytes: %d configurations\n%s", ltRepN, ws, len(lines)-1, strings.Join(lines, "\n"))
	}
}

// fastFill returns n bfloat16 values, a random pool repeated with an odd period (cheap at K3 sizes).
func fastFill(rng *rand.Rand, n int, scale float64) []float32 {
	pool := make([]float32, 1<<20+7)
	for i := range pool {
		pool[i] = bf16.Round(float32(scale * rng.NormFloat64()))
	}
	v := make([]float32, n)
	for off := 0; off < n; off += copy(v[off:], pool) {
	}
	return v
}

// bf16Weight uploads a random rows x cols bfloat16 weight.
func bf16Weight(t testing.TB, b *Backend, rng *rand.Rand, rows, cols int, scale float64) ops.Tensor {
	t.Helper()
	raw := make([]byte, 2*rows*cols)
	bf16.Encode(raw, fastFill(rng, rows*cols, scale))
	w, err := b.Upload(ops.WeightBF16, rows, cols, raw)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestCuBLASLtBatchInvariance is the proof that the pinned algorithm keeps batch invariance: a block of 7
// rows computed alone equals, bit for bit, the same rows computed one at a time and embedded at several
// offsets (first rows, second row, an odd offset, last rows) in waves of 64, 65, 300, 4096 and 20,000
// rows, at K3's shapes 12288x7168 and 7168x12288 and a small odd shape. The waves are built on the device
// (Gather from one uploaded table), so only the block's rows come back.
func TestCuBLASLtBatchInvariance(t *testing.T) {
	b := newLtBackend(t, true)
	rng := rand.New(rand.NewPCG(11, 12))
	const block, filler = 7, 20000
	for _, sh := range [][2]int{{12288, 7168}, {7168, 12288}, {6144, 3584}, {3584, 3072}, {131, 1001}} {
		m, k := sh[0], sh[1]
		t.Run(fmt.Sprintf("%dx%d", m, k), func(t *testing.T) {
			s := ltPlan(t, b, m, k)
			if !s.ok {
				if m > 1000 {
					t.Fatalf("no pinned algorithm for a K3 shape: %s", s.why)
				}
				t.Skipf("the shape stays on the project's kernel: %s", s.why)
			}
			t.Logf("pinned: %v", s.config)
			w := bf16Weight(t, b, rng, m, k, 1/math.Sqrt(float64(k)))
			defer b.Free(w)
			table, err := b.FromHost(filler+block, k, fastFill(rng, (filler+block)*k, 1)) // the block is the last 7 rows
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free(table)
			// rows runs MatMul on the wave table[ids] and returns the rows at [o, o+block) of the output
			rows := func(ids []int32, o int) []float32 {
				t.Helper()
				x, err := b.Gather(table, ids)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Free(x)
				y, err := b.MatMul(x, w)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Free(y)
				pick := make([]int32, 0, block)
				for i := range min(block, len(ids)-o) {
					pick = append(pick, int32(o+i))
				}
				yb, err := b.Gather(y, pick)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Free(yb)
				v, err := b.ToHost(yb)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			blockIDs := make([]int32, block)
			for i := range blockIDs {
				blockIDs[i] = int32(filler + i)
			}
			ref := rows(blockIDs, 0) // n = 7
			compare := func(what string, got, want []float32) {
				t.Helper()
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Errorf("%s: row %d col %d: %g, alone %g", what, i/m, i%m, got[i], want[i])
						return
					}
				}
			}
			for i := range block { // n = 1
				compare(fmt.Sprintf("row %d alone (n=1)", i), rows(blockIDs[i:i+1], 0), ref[i*m:(i+1)*m])
			}
			checked := 1 + block
			for _, n := range []int{64, 65, 300, 4096, 20000} {
				var offsets []int
				for _, o := range []int{0, 1, 37, n / 2, n - block} {
					if o+block <= n && !slices.Contains(offsets, o) {
						offsets = append(offsets, o)
					}
				}
				for _, o := range offsets {
					ids := make([]int32, n)
					for i := range ids {
						ids[i] = int32(i)
					}
					copy(ids[o:], blockIDs)
					compare(fmt.Sprintf("n=%d, block at row %d", n, o), rows(ids, o), ref)
					checked++
				}
			}
			if !t.Failed() {
				t.Logf("%dx%d by %dx%d: the 7-row block is bit-identical alone, row by row (n=1) and in %d waves of 64 to 20,000 rows at offsets 0, 1, 37, n/2 and n-7", block, k, m, k, checked-1-block)
			}

			// every row: a wave of 20,000 rows, the same rows 37 further down a wave of the same size, and
			// its first 4097 rows alone
			wave := func(ids []int32) []float32 {
				t.Helper()
				x, err := b.Gather(table, ids)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Free(x)
				y, err := b.MatMul(x, w)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Free(y)
				v, err := b.ToHost(y)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			const shift, part = 37, 4097
			ids1, ids2 := make([]int32, filler), make([]int32, filler)
			for i := range ids1 {
				ids1[i] = int32(i)
				if i < shift {
					ids2[i] = int32(filler + i%block)
				} else {
					ids2[i] = int32(i - shift)
				}
			}
			y1 := wave(ids1)
			differ := func(what string, got, want []float32) {
				t.Helper()
				n := 0
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						n++
					}
				}
				if n > 0 {
					t.Errorf("%s: %d of %d values differ", what, n, len(want))
				}
			}
			differ(fmt.Sprintf("rows 0..%d moved down %d rows", filler-shift, shift), wave(ids2)[shift*m:], y1[:(filler-shift)*m])
			differ(fmt.Sprintf("the first %d rows alone", part), wave(ids1[:part]), y1[:part*m])
			if !t.Failed() {
				t.Logf("every row of a %d-row wave is bit-identical %d rows further down and in a %d-row wave", filler, shift, part)
			}
		})
	}
}

// TestCuBLASLtConformance runs the shared suite with cuBLASLt required, then lists which weight shapes of
// the suite ran on it.
func TestCuBLASLtConformance(t *testing.T) {
	b := newLtBackend(t, true)
	f, err := New(Options{Precision: ops.FP32, Sync: true, CuBLASLt: CuBLASLtRequire}) // FP32: never cuBLASLt
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.lt != nil {
		t.Error("an FP32 backend holds a cuBLASLt handle")
	}
	backends := map[ops.Precision]ops.Backend{ops.BF16: b, ops.FP32: f}
	opstest.RunAll(t, func(p ops.Precision) ops.Backend { return backends[p] })
	var on, off []string
	_ = b.run("list", func(*opCtx) error {
		for key, s := range b.lt.shapes {
			if s.ok {
				on = append(on, fmt.Sprintf("%dx%d", key.m, key.k))
			} else {
				off = append(off, fmt.Sprintf("%dx%d (%s)", key.m, key.k, s.why))
			}
		}
		return nil
	})
	slices.Sort(on)
	slices.Sort(off)
	t.Logf("weight shapes on cuBLASLt: %v; on the project's kernel: %v", on, off)
}

// TestCuBLASLtTiming times MatMul at K3's q/k/v/g shape (12288x7168 weight) for 4096, 16384 and 65536
// rows on cuBLASLt and on the project's tensor-core kernel, and cuBLASLt's GEMM alone (without the
// conversion of x and the rounding of the outputs). flop = 2 n m k.
func TestCuBLASLtTiming(t *testing.T) {
	skipTiming(t)
	lt := newLtBackend(t, false)
	tc := testBackend(t, Options{Precision: ops.BF16, CuBLASLt: CuBLASLtOff})
	timeIt := func(b *Backend, what string, flop float64, fn func() error) float64 {
		t.Helper()
		if err := fn(); err != nil { // warm-up (and the plan)
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
		slices.Sort(ds)
		med := ds[2]
		rate := flop / med.Seconds() / 1e12
		t.Logf("TIMING %-62s %9.3f ms  %7.1f TFLOP/s", what, float64(med.Microseconds())/1e3, rate)
		return rate
	}
	rng := rand.New(rand.NewPCG(21, 22))
	for _, sh := range [][3]int{{12288, 7168, 4096}, {12288, 7168, 16384}, {12288, 7168, 65536}, {7168, 12288, 16384}, {12288, 7168, 1}, {12288, 7168, 300},
		{6144, 3584, 1170}, {6144, 3584, 4096}, {3584, 3072, 1170}, {3584, 3072, 4096}} { // experts: 1,170 rows an expert at 65,536 tokens
		m, k, n := sh[0], sh[1], sh[2]
		flop := 2 * float64(n) * float64(m) * float64(k)
		var rates [2]float64
		for i, b := range []*Backend{lt, tc} {
			// x: 4096 random rows (or n), repeated on the device up to n
			base := min(n, 4096)
			x0, err := b.FromHost(base, k, fastFill(rng, base*k, 1))
			if err != nil {
				t.Fatal(err)
			}
			ids := make([]int32, n)
			for r := range ids {
				ids[r] = int32(r % base)
			}
			x, err := b.Gather(x0, ids)
			if err != nil {
				t.Fatal(err)
			}
			b.Free(x0)
			w := bf16Weight(t, b, rng, m, k, 1/math.Sqrt(float64(k)))
			name := [2]string{"cuBLASLt", "tensor-core kernel v3"}[i]
			rates[i] = timeIt(b, fmt.Sprintf("MatMul %dx%d by %dx%d, %s", n, k, m, k, name), flop, func() error {
				y, err := b.MatMul(x, w)
				b.Free(y)
				return err
			})
			if s := ltPlan(t, lt, m, k); b == lt && !s.ok {
				t.Errorf("%dx%d: no pinned cuBLASLt algorithm (%s): the first line timed the tensor-core kernel", m, k, s.why)
			} else if b == lt { // the GEMM alone, on a converted copy of x
				var xb, d uint64
				err := b.run("alloc", func(c *opCtx) error {
					var err error
					if xb, err = b.dv.Malloc(2 * s.ldb * n); err != nil {
						return err
					}
					if d, err = b.dv.Malloc(4 * n * m); err != nil {
						return err
					}
					return c.launch1D("k_to_bf16", s.ldb*n, xb, x.(*Tensor).ptr, int64(n), int32(k), int32(s.ldb))
				})
				if err != nil {
					t.Fatal(err)
				}
				timeIt(b, fmt.Sprintf("  cublasLtMatmul alone, %d rows", n), flop, func() error {
					return b.run("gemm", func(*opCtx) error { return b.lt.matmul(s, b.dv.Stream, b.lt.ws, d, xb, w.(*Tensor).ptr, n, m, k) })
				})
				_ = b.run("free", func(*opCtx) error { return errors.Join(b.dv.Free(xb), b.dv.Free(d)) })
			}
			b.Free(x)
			b.Free(w)
		}
		t.Logf("TIMING %dx%d by %dx%d: cuBLASLt / tensor-core kernel = %.2fx", n, k, m, k, rates[0]/rates[1])
	}
}

// TestCuBLASLtVersusTensorCoreKernel counts the outputs where cuBLASLt and the project's tensor-core kernel
// differ at K3's shapes (both batch invariant; they differ only where their orders of k differ). It logs
// and does not fail: either answer is within the contract.
func TestCuBLASLtVersusTensorCoreKernel(t *testing.T) {
	lt := newLtBackend(t, true)
	rng := rand.New(rand.NewPCG(31, 32))
	for _, sh := range [][3]int{{12288, 7168, 300}, {7168, 12288, 300}, {3584, 7168, 300}, {67, 1100, 130}} {
		m, k, n := sh[0], sh[1], sh[2]
		w := bf16Weight(t, lt, rng, m, k, 1/math.Sqrt(float64(k)))
		x, err := lt.FromHost(n, k, fastFill(rng, n*k, 1))
		if err != nil {
			t.Fatal(err)
		}
		got := make([][]float32, 2)
		err = lt.run("versus", func(c *opCtx) error {
			wr, xp := weightOf(w.(*Tensor)), x.(*Tensor).ptr
			s, err := lt.lt.shape(m, k)
			if err != nil || !s.ok {
				return errors.Join(err, fmt.Errorf("no pinned algorithm: %s", s.why))
			}
			for i := range got {
				out, err := c.temp(4 * n * m)
				if err != nil {
					return err
				}
				if i == 0 {
					err = c.gemmLt(s, out, xp, n, wr, true)
				} else {
					kernel := wr.tc // what gemm picks without cuBLASLt: version 3 only where its loads fit
					if k%wr.vecK == 0 && xp%16 == 0 && wr.ptr%16 == 0 {
						kernel = wr.tcVec
					}
					err = c.gemmKernel(kernel, tcTile, out, xp, n, wr, 1)
				}
				if err != nil {
					return err
				}
				got[i] = make([]float32, n*m)
				if err := download(lt, got[i], out); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%dx%d: %v", m, k, err)
		}
		diff := 0
		for i := range got[0] {
			if math.Float32bits(got[0][i]) != math.Float32bits(got[1][i]) {
				diff++
			}
		}
		t.Logf("%dx%d by %dx%d: %d of %d values differ between cuBLASLt and the tensor-core kernel", n, k, m, k, diff, n*m)
		lt.Free(w)
		lt.Free(x)
	}
}
