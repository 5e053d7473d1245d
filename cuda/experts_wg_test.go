package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// The wgmma path of the grouped experts (kernels/experts_wg.cu): within rounding of the grouped kernels
// (the same decoded weights and rounding points, the tensor core's order inside a k step), and equal to
// itself bit for bit across expert subsets, orders and row subsets.

// wgBackend returns a BF16 backend whose device runs the wgmma kernels, or skips.
func wgBackend(t *testing.T) *Backend {
	t.Helper()
	b := testBackend(t, Options{Precision: ops.BF16})
	if !b.wgOK() {
		t.Skipf("the wgmma kernels need sm_90a; the device is %s", b.info.Arch)
	}
	return b
}

// TestExpertsWG: shapes with tails in every dimension (k % 64 == 32 and an odd panel count, gate/up and
// down column tiles cut short, experts of 1, 63, 64, 65, 129 and 300 rows: tiles of 256 rows nearly
// empty, partly filled, and an expert over two tiles).
func TestExpertsWG(t *testing.T) {
	b := wgBackend(t)
	counts := []int{0, 1, 63, 64, 65, 129, 300}
	ids := []int{3, 4, 9, 10, 17, 22, 31}
	for _, sh := range []struct{ latent, ffn int }{{256, 192}, {96, 160}, {32, 32}, {288, 416}, {3584, 3072}} {
		t.Run(fmt.Sprintf("latent%d_ffn%d", sh.latent, sh.ffn), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(sh.latent), 9))
			const rows = 307
			c := newExpertsCase(t, b, rng, sh.latent, sh.ffn, rows, ids, counts)
			defer c.free(b)
			es := c.es
			want := c.run(t, b, "wgmma", expertsWG, 0, rows, es)
			closeToGrouped(t, "wgmma vs grouped kernels", want, c.run(t, b, "grouped", expertsGrouped, 0, rows, es), c.accv)
			c.sameAcrossCalls(t, b, rng, "wgmma", expertsWG, expertsWG, want)
		})
	}
}

// TestExpertsWGTiming times the wgmma path against the cuBLASLt path (the production path) at K3's sizes
// with the row counts an expert gets in the 262,144-token bench wave: ~1,200 (a 65,536-token slice),
// ~1,720 (three slices of 96,256) and ~4,680 (the whole wave in one call, expert-major), checks the two
// within rounding, and times the wgmma kernels alone and without decoding (CUDA events). FLOP count as in
// TestExpertsGroupedTiming: rows x k x 3 x 2 x latent x ffn a call.
func TestExpertsWGTiming(t *testing.T) {
	skipTiming(t)
	b := wgBackend(t)
	logKernelAttrs(t, b, "k_experts_gateup_wg", "k_experts_down_wg")
	const latent, ffn, beta, linBeta = 3584, 3072, 4, 25
	rng := rand.New(rand.NewPCG(21, 22))
	const experts = 896
	es := k3Experts(t, b, rng, experts)
	pool := normalPool(rng)
	for _, tokens := range []int{65536, 96256, 262144} {
		name := fmt.Sprintf("%d experts, %d tokens x 16", experts, tokens)
		rt := randRouting(rng, tokens, 16, experts, 0)
		z := poolTensor(t, b, pool, tokens, latent)
		flop := float64(tokens) * 16 * 3 * 2 * latent * ffn
		var got [2][]float32
		for i, mode := range []expertsMode{expertsLt, expertsWG} {
			acc, err := b.Zeros(tokens, latent)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.expertsAccumulate(acc, z, rt, es, beta, linBeta, mode); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got[i], err = b.ToHost(acc); err != nil {
				t.Fatal(err)
			}
			med := medianTime(t, b, 3, func() error { return b.expertsAccumulate(acc, z, rt, es, beta, linBeta, mode) })
			what := map[expertsMode]string{expertsLt: "cuBLASLt", expertsWG: "wgmma"}[mode]
			t.Logf("TIMING ExpertsAccumulate %-34s %-10s %9.3f ms %8.1f TFLOP/s", name, what, float64(med.Microseconds())/1e3, flop/med.Seconds()/1e12)
			b.Free(acc)
		}
		closeToGrouped(t, name+": wgmma vs cuBLASLt", got[1], got[0], make([]float32, len(got[0])))
		wgBreakdown(t, b, name, z.(*Tensor), rt, es, latent, ffn, flop)
		b.Free(z)
	}
}

// wgBreakdown times the wgmma GEMM kernels alone on one planned call (CUDA events, median of 5 after a
// warm-up), with and without decoding.
func wgBreakdown(t *testing.T, b *Backend, name string, z *Tensor, rt ops.Routing, experts []ops.Expert, latent, ffn int, flop float64) {
	t.Helper()
	es, work := assigned(t, experts, rt, z.rows)
	p := planGroupedTiles(es, work, z.rows, wTileRows)
	acc, err := b.Zeros(z.rows, latent)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(acc)
	err = b.run("timing", func(c *opCtx) error {
		d, err := c.gatheredCall(&p, acc.(*Tensor).ptr, z.ptr, latent, ffn, 4, 25, "_wg")
		if err != nil {
			return err
		}
		for _, s := range []struct {
			what, kernels string
			fn            func(*groupedDev) error
			flop          float64
		}{
			{"gate/up (+SiTU)", "_wg", c.groupedGateUp, flop * 2 / 3},
			{"down", "_wg", c.groupedDown, flop / 3},
			{"gate/up no dec", "_wg_nodec", c.groupedGateUp, flop * 2 / 3},
			{"down no dec", "_wg_nodec", c.groupedDown, flop / 3},
		} {
			d.kernels = s.kernels
			ms, err := eventTime(c, 5, func() error { return s.fn(d) })
			if err != nil {
				return fmt.Errorf("%s: %w", s.what, err)
			}
			t.Logf("TIMING   %-40s %-16s %9.3f ms %8.1f TFLOP/s (%d rows, %d tiles)", name, s.what, ms, s.flop/ms/1e9, p.rows, p.tiles)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
