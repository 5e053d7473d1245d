package cuda

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestExpertsGroupedTiming times ExpertsAccumulate at K3's sizes (latent 3584, ffn 3072, MXFP4) on both
// paths, checks that they agree bit for bit there too, and times each grouped kernel alone with CUDA
// events (skipped with -short). FLOP count: every (row, chosen expert) pair costs three GEMV rows of
// 2 * 3584 * 3072, so tokens * k * 3 * 2 * latent * ffn a call. Op times are host-timed around a device
// synchronisation (median of 5, of 1-3 for the slow per-expert path) and include planning and the upload.
func TestExpertsGroupedTiming(t *testing.T) {
	skipTiming(t)
	b := testBackend(t, Options{Precision: ops.BF16})
	logKernelAttrs(t, b, "k_experts_gateup", "k_experts_down", "k_matmul_tc_mxfp4_vec")
	const latent, ffn, beta, linBeta = 3584, 3072, 4, 25
	rng := rand.New(rand.NewPCG(11, 12))
	es := k3Experts(t, b, rng, 896)
	pool := normalPool(rng)
	for _, c := range []struct {
		experts, tokens, k, perExpertRuns int
	}{
		{16, 1024, 4, 3},    // cuda/records/JOURNAL.md run 3's case: 256 rows an expert
		{128, 2400, 16, 3},  // ~300 rows an expert: a 16k-token wave, experts in chunks of 128
		{128, 9600, 16, 3},  // ~1,200 rows an expert: a 64k-token wave
		{896, 16800, 16, 1}, // every expert of a layer in one call, ~300 rows each
	} {
		name := fmt.Sprintf("%d experts, %d tokens x %d", c.experts, c.tokens, c.k)
		rows := c.tokens
		rt := randRouting(rng, rows, c.k, c.experts, 0)
		z := poolTensor(t, b, pool, rows, latent)
		call := es[:c.experts]
		flop := float64(rows) * float64(c.k) * 3 * 2 * latent * ffn
		accs := make([]ops.Tensor, 2)
		got := make([][]float32, 2)
		for i, mode := range []expertsMode{expertsGrouped, expertsPerExpert} {
			var err error
			if accs[i], err = b.Zeros(rows, latent); err != nil {
				t.Fatal(err)
			}
			if err := b.expertsAccumulate(accs[i], z, rt, call, beta, linBeta, mode); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got[i], err = b.ToHost(accs[i]); err != nil {
				t.Fatal(err)
			}
		}
		sameBits(t, name+": grouped vs per-expert", got[0], got[1], latent)
		modes := []expertsMode{expertsGrouped, expertsPerExpert, expertsGroupedF32}
		if b.lt != nil {
			modes = append(modes, expertsLt)
		}
		for i, mode := range modes {
			i = min(i, 1) // the later runs accumulate into the per-expert path's acc
			runs := 5
			if mode == expertsPerExpert {
				runs = c.perExpertRuns
			}
			med := medianTime(t, b, runs, func() error {
				return b.expertsAccumulate(accs[i], z, rt, call, beta, linBeta, mode)
			})
			what := map[expertsMode]string{expertsGrouped: "grouped", expertsPerExpert: "per-expert", expertsGroupedF32: "grouped32", expertsLt: "cuBLASLt"}[mode]
			t.Logf("TIMING ExpertsAccumulate %-34s %-10s %9.3f ms %8.1f TFLOP/s", name, what, float64(med.Microseconds())/1e3, flop/med.Seconds()/1e12)
		}
		if b.lt != nil { // the cuBLASLt path's GEMMs on the compute stream alone and over side streams
			for _, ns := range []int{1, 2, 3, 4, 6, 8} {
				b.opts.ExpertStreams = ns
				med := medianTime(t, b, 5, func() error {
					return b.expertsAccumulate(accs[1], z, rt, call, beta, linBeta, expertsLt)
				})
				t.Logf("TIMING ExpertsAccumulate %-34s %-10s %9.3f ms %8.1f TFLOP/s", name, fmt.Sprintf("lt %d lanes", ns), float64(med.Microseconds())/1e3, flop/med.Seconds()/1e12)
			}
			b.opts.ExpertStreams = 0
		}
		kernelBreakdown(t, b, name, accs[0].(*Tensor), z.(*Tensor), rt, call, latent, ffn, flop)
		b.Free(z)
		b.Free(accs[0])
		b.Free(accs[1])
	}
}

// k3Experts uploads n experts at K3's sizes (latent 3584, ffn 3072), the same random MXFP4 bytes with
// ordinary scales (2^-9 .. 2^-6) in n device buffers (the kernels cannot tell), freed when the test ends.
func k3Experts(t *testing.T, b *Backend, rng *rand.Rand, n int) []ops.Expert {
	t.Helper()
	const latent, ffn = 3584, 3072
	parts := randExpertBytes(rng, latent, ffn)
	for i := 1; i < 6; i += 2 {
		for j := range parts[i] {
			parts[i][j] = byte(118 + j%4)
		}
	}
	var es []ops.Expert
	t.Cleanup(func() {
		for _, e := range es {
			b.Free(e)
		}
	})
	start := time.Now()
	for id := range n {
		e, err := b.UploadExpert(id, latent, ffn, parts[0], parts[1], parts[2], parts[3], parts[4], parts[5])
		if err != nil {
			t.Fatalf("expert %d: %v", id, err)
		}
		es = append(es, e)
	}
	t.Logf("uploaded %d experts (%.1f GB) in %v", n, float64(n)*float64(3*latent*ffn*17/32)/1e9, time.Since(start))
	return es
}

// normalPool returns 2^20 + 7 standard normal values, which activations of any size cycle through.
func normalPool(rng *rand.Rand) []float32 {
	pool := make([]float32, 1<<20+7)
	for i := range pool {
		pool[i] = float32(rng.NormFloat64())
	}
	return pool
}

// poolTensor uploads a rows x cols activation whose values cycle through pool (the caller frees it).
func poolTensor(t *testing.T, b *Backend, pool []float32, rows, cols int) ops.Tensor {
	t.Helper()
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = pool[i%len(pool)]
	}
	x, err := b.FromHost(rows, cols, v)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// randRouting routes rows rows to k distinct experts each of ids first .. first+experts-1, uniformly,
// with weights in [0.5, 1.5) / k.
func randRouting(rng *rand.Rand, rows, k, experts, first int) ops.Routing {
	rt := ops.Routing{K: k, IDs: make([]int32, rows*k), Weights: make([]float32, rows*k)}
	for r := range rows {
		for j, e := range rng.Perm(experts)[:k] {
			rt.IDs[r*k+j], rt.Weights[r*k+j] = int32(first+e), float32(0.5+rng.Float64())/float32(k)
		}
	}
	return rt
}

// medianTime runs fn once to warm up, then runs times, each host-timed around a device synchronisation,
// and returns the median.
func medianTime(t *testing.T, b *Backend, runs int, fn func() error) time.Duration {
	t.Helper()
	if err := fn(); err != nil {
		t.Fatal(err)
	}
	if err := b.Synchronize(); err != nil {
		t.Fatal(err)
	}
	var ds []time.Duration
	for range runs {
		start := time.Now()
		if err := fn(); err != nil {
			t.Fatal(err)
		}
		if err := b.Synchronize(); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// assigned returns a call's experts as this backend's and the rows of rows routed to each (rt.AssignRows).
func assigned(t *testing.T, experts []ops.Expert, rt ops.Routing, rows int) ([]*Expert, []ops.ExpertRows) {
	t.Helper()
	es := make([]*Expert, len(experts))
	ids := make([]int, len(experts))
	for i, e := range experts {
		es[i], ids[i] = e.(*Expert), e.ID()
	}
	work, err := rt.AssignRows(ids, rows)
	if err != nil {
		t.Fatal(err)
	}
	return es, work
}

// kernelBreakdown times each grouped kernel alone (CUDA events, median of 5 after a warm-up) on one
// planned call, and reports the tile shape's waste: rows the mma computes (16-row groups) over rows.
func kernelBreakdown(t *testing.T, b *Backend, name string, acc, z *Tensor, rt ops.Routing, experts []ops.Expert,
	latent, ffn int, flop float64) {
	t.Helper()
	es, work := assigned(t, experts, rt, z.rows)
	p := planGrouped(es, work, z.rows)
	groups := 0
	for i := range work {
		groups += (len(work[i].Rows) + 15) / 16
	}
	err := b.run("timing", func(c *opCtx) error {
		d, err := c.prepareGrouped(&p, acc.ptr, z.ptr, latent, ffn, 4, 25, "")
		if err != nil {
			return err
		}
		var total float64
		for _, s := range []struct {
			what, kernels string
			fn            func(*groupedDev) error
			flop          float64
		}{
			{"gather", "", c.groupedGather, 0},
			{"SiTU tables", "", c.groupedSiTUTables, 0},
			{"gate/up (+SiTU)", "", c.groupedGateUp, flop * 2 / 3},
			{"down", "", c.groupedDown, flop / 3},
			{"combine", "", c.groupedCombine, 0},
			{"gate/up f32 dec", "_f32", c.groupedGateUp, flop * 2 / 3},
			{"down f32 dec", "_f32", c.groupedDown, flop / 3},
			{"gate/up no dec", "_nodec", c.groupedGateUp, flop * 2 / 3},
			{"down no dec", "_nodec", c.groupedDown, flop / 3},
		} {
			d.kernels = s.kernels
			ms, err := eventTime(c, 5, func() error { return s.fn(d) })
			if err != nil {
				return fmt.Errorf("%s: %w", s.what, err)
			}
			if s.kernels == "" {
				total += ms
			}
			rate := ""
			if s.flop > 0 {
				rate = fmt.Sprintf("%8.1f TFLOP/s", s.flop/ms/1e9)
			}
			t.Logf("TIMING   %-40s %-16s %9.3f ms %s", name, s.what, ms, rate)
		}
		t.Logf("TIMING   %-40s %-16s %9.3f ms %8.1f TFLOP/s (kernels only; %d rows, %d tiles; mma rows %d = %.1f%% of the rows)",
			name, "sum", total, flop/total/1e9, p.rows, p.tiles, 16*groups, 100*float64(16*groups)/float64(p.rows))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// eventTime returns the median device time in milliseconds of runs calls of fn after one warm-up,
// each between two CUDA events on the backend's stream (eventTimer). On the CUDA thread.
func eventTime(c *opCtx, runs int, fn func() error) (float64, error) {
	t := newEventTimer(c)
	defer t.destroy()
	if err := fn(); err != nil {
		return 0, err
	}
	var ms []float64
	for range runs {
		v, err := t.span(1, fn)
		if err != nil {
			return 0, err
		}
		ms = append(ms, v)
	}
	slices.Sort(ms)
	return ms[len(ms)/2], nil
}

// logKernelAttrs logs the registers and local memory (spills) of kernels as the driver loaded them.
func logKernelAttrs(t *testing.T, b *Backend, names ...string) {
	t.Helper()
	for _, k := range names {
		regs, local := kernelAttrs(t, b, k)
		t.Logf("%s: %d registers, %d bytes of local memory a thread", k, regs, local)
	}
}

// kernelAttrs returns a loaded kernel's registers and local memory (spills) a thread.
func kernelAttrs(t *testing.T, b *Backend, name string) (regs, local int32) {
	t.Helper()
	const numRegs, localBytes = 4, 3 // CU_FUNC_ATTRIBUTE_NUM_REGS, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
	err := b.run("attrs", func(c *opCtx) error {
		d := b.drv
		if err := d.Check("cuFuncGetAttribute", bind.Call(d.CuFuncGetAttribute, uintptr(unsafe.Pointer(&regs)), numRegs, b.fn(name))); err != nil {
			return err
		}
		return d.Check("cuFuncGetAttribute", bind.Call(d.CuFuncGetAttribute, uintptr(unsafe.Pointer(&local)), localBytes, b.fn(name)))
	})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return regs, local
}
