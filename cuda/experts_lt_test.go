package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// The cuBLASLt path of the grouped experts (experts_lt.go): close to the grouped kernels (the same decoded
// weights and rounding points, sums in another order), and equal to itself bit for bit across expert
// subsets, orders and row subsets, including an expert whose rows span two of its GEMM blocks.

// expertsCase is a call's inputs: experts, a routing of rows that chose them and random z and acc.
type expertsCase struct {
	es          []ops.Expert
	rt          ops.Routing
	zv, accv    []float32
	rows        int
	latent, ffn int
}

// newExpertsCase uploads experts ids (row counts counts) and routes rows to them at random, K slots a
// row (the others ids no call holds).
func newExpertsCase(t *testing.T, b *Backend, rng *rand.Rand, latent, ffn, rows int, ids, counts []int) *expertsCase {
	t.Helper()
	c := &expertsCase{rows: rows, latent: latent, ffn: ffn}
	for _, id := range ids {
		p := randExpertBytes(rng, latent, ffn)
		e, err := b.UploadExpert(id, latent, ffn, p[0], p[1], p[2], p[3], p[4], p[5])
		if err != nil {
			t.Fatal(err)
		}
		c.es = append(c.es, e)
	}
	k := len(ids)
	c.rt = ops.Routing{K: k, IDs: make([]int32, rows*k), Weights: make([]float32, rows*k)}
	chose := make([][]int, rows)
	for i, n := range counts {
		for _, r := range rng.Perm(rows)[:n] {
			chose[r] = append(chose[r], ids[i])
		}
	}
	for r := range rows {
		slots := append([]int(nil), chose[r]...)
		for j := len(slots); j < k; j++ {
			slots = append(slots, 1000+j)
		}
		for j, s := range rng.Perm(k) {
			c.rt.IDs[r*k+j] = int32(slots[s])
			c.rt.Weights[r*k+j] = float32(0.05 + 0.9*rng.Float64())
		}
	}
	c.zv, c.accv = make([]float32, rows*latent), make([]float32, rows*latent)
	for i := range c.zv {
		c.zv[i] = float32(rng.NormFloat64())
		c.accv[i] = float32(0.1 * rng.NormFloat64())
	}
	return c
}

func (c *expertsCase) free(b *Backend) {
	for _, e := range c.es {
		b.Free(e)
	}
}

// run adds the calls' experts into a guarded copy of acc, over rows from .. to-1 of the case (the routing
// and z cut to them), and returns the result.
func (c *expertsCase) run(t *testing.T, b *Backend, what string, mode expertsMode, from, to int, calls ...[]ops.Expert) []float32 {
	t.Helper()
	k := c.rt.K
	rt := ops.Routing{K: k, IDs: c.rt.IDs[from*k : to*k], Weights: c.rt.Weights[from*k : to*k]}
	z := newGuarded(t, b, c.zv[from*c.latent:to*c.latent], to-from, c.latent)
	defer b.Free(z.big)
	acc := newGuarded(t, b, c.accv[from*c.latent:to*c.latent], to-from, c.latent)
	defer b.Free(acc.big)
	for _, call := range calls {
		if err := b.expertsAccumulate(acc.view, z.view, rt, call, 4, 25, mode); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	return acc.values(t, b, what)
}

// sameAcrossCalls checks mode's result want (the case's experts in one call, over all its rows) against
// the same path's: the experts out of order (by shuffledMode), in the subsets {3,4,9} {10} {17,22,31}
// of the tests' ids, one expert a call, and rows 100..164 alone.
func (c *expertsCase) sameAcrossCalls(t *testing.T, b *Backend, rng *rand.Rand, what string, mode, shuffledMode expertsMode, want []float32) {
	t.Helper()
	es := c.es
	shuffled := slices.Clone(es)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	sameBits(t, what+", experts out of order", c.run(t, b, "shuffled", shuffledMode, 0, c.rows, shuffled), want, c.latent)
	sameBits(t, what+", subsets {3,4,9} {10} {17,22,31}",
		c.run(t, b, "subsets", mode, 0, c.rows, es[:3], es[3:4], es[4:]), want, c.latent)
	sameBits(t, what+", one expert a call",
		c.run(t, b, "singles", mode, 0, c.rows, es[:1], es[1:2], es[2:3], es[3:4], es[4:5], es[5:6], es[6:]), want, c.latent)
	sameBits(t, what+", rows 100..164 alone", c.run(t, b, "rows alone", mode, 100, 165, es),
		want[100*c.latent:165*c.latent], c.latent)
}

// closeToGrouped fails the test unless got (cuBLASLt path) is within rounding of want (grouped kernels):
// the largest difference within 1% of the largest expert contribution |want - acc0| (a bfloat16 rounding
// that went the other way somewhere, 2^-8 of one value), and at most 1% of the values off by more than
// 1e-5 of that scale. A wrong layout, decode or row would be off by the scale itself almost everywhere.
func closeToGrouped(t *testing.T, what string, got, want, acc0 []float32) {
	t.Helper()
	scale := 0.0
	for i := range want {
		scale = max(scale, math.Abs(float64(want[i])-float64(acc0[i])))
	}
	worst, off := 0.0, 0
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if math.IsNaN(d) {
			d = math.Inf(1)
		}
		worst = max(worst, d)
		if d > 1e-5*scale {
			off++
		}
	}
	t.Logf("%s: max |diff| %.3g (%.3g of the largest contribution %.3g), %d of %d values past 1e-5 of it", what, worst, worst/scale, scale, off, len(want))
	if !(worst <= 1e-2*scale) || off > len(want)/100 {
		t.Errorf("%s: max |diff| %.3g against contributions up to %.3g, %d of %d values off: not rounding", what, worst, scale, off, len(want))
	}
}

// TestExpertsLt: the cuBLASLt path against the grouped kernels (within rounding) and against itself
// (the same bits for expert subsets, shuffled experts, one expert a call, and a block of rows alone).
func TestExpertsLt(t *testing.T) {
	b := newLtBackend(t, true)
	counts := []int{0, 1, 63, 64, 65, 129, 300}
	ids := []int{3, 4, 9, 10, 17, 22, 31}
	for _, sh := range []struct{ latent, ffn int }{{256, 192}, {96, 160}, {32, 32}, {3584, 3072}} {
		t.Run(fmt.Sprintf("latent%d_ffn%d", sh.latent, sh.ffn), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(sh.latent), 7))
			const rows = 307
			c := newExpertsCase(t, b, rng, sh.latent, sh.ffn, rows, ids, counts)
			defer c.free(b)
			es := c.es
			want := c.run(t, b, "cuBLASLt", expertsLt, 0, rows, es)
			closeToGrouped(t, "cuBLASLt vs grouped kernels", want, c.run(t, b, "grouped", expertsGrouped, 0, rows, es), c.accv)
			c.sameAcrossCalls(t, b, rng, "cuBLASLt", expertsLt, expertsAuto, want) // auto: cuBLASLt where it is in use
			// the GEMMs on the compute stream alone, and over 2 side streams, give the lanes' bits
			defer func() { b.decodeBytes, b.opts.ExpertStreams = 0, 0 }()
			b.opts.ExpertStreams = 1
			sameBits(t, "cuBLASLt, one stream", c.run(t, b, "one stream", expertsLt, 0, rows, es), want, sh.latent)
			// one expert a decode chunk: six chunks (with side streams, two decode buffers in turn)
			b.decodeBytes = 2 * 3 * sh.latent * sh.ffn
			sameBits(t, "cuBLASLt, one expert a decode chunk, one stream", c.run(t, b, "chunks of one", expertsLt, 0, rows, es), want, sh.latent)
			b.opts.ExpertStreams = 2
			sameBits(t, "cuBLASLt, one expert a decode chunk, two side streams", c.run(t, b, "chunks of one", expertsLt, 0, rows, es), want, sh.latent)
			b.opts.ExpertStreams = 0
			sameBits(t, "cuBLASLt, one expert a decode chunk, default side streams", c.run(t, b, "chunks of one", expertsLt, 0, rows, es), want, sh.latent)
		})
	}
	// One expert with more rows than a GEMM block (ltExpertRows): rows in the second block give the same
	// bits alone as inside the whole call.
	t.Run("two_blocks", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		const latent, ffn, rows = 64, 96, ltExpertRows + 70
		c := newExpertsCase(t, b, rng, latent, ffn, rows, []int{5, 6}, []int{rows, 40})
		defer c.free(b)
		want := c.run(t, b, "whole", expertsLt, 0, rows, c.es)
		sameBits(t, "rows past the first block, alone", c.run(t, b, "tail alone", expertsLt, ltExpertRows-10, rows, c.es),
			want[(ltExpertRows-10)*latent:], latent)
		closeToGrouped(t, "two blocks vs grouped kernels", want, c.run(t, b, "grouped", expertsGrouped, 0, rows, c.es), c.accv)
	})
}

// TestPlanGroupedNonzero: the plan lists the experts with rows, by index, after the other tables, and
// each expert's row count. No GPU needed.
func TestPlanGroupedNonzero(t *testing.T) {
	es := []*Expert{{id: 1}, {id: 4}, {id: 9}, {id: 12}}
	work := []ops.ExpertRows{{Rows: []int32{0, 2}, Weights: []float32{1, 1}}, {}, {Rows: []int32{1}, Weights: []float32{1}}, {}}
	p := planGrouped(es, work, 3)
	if !slices.Equal(p.counts, []int{2, 0, 1, 0}) || !slices.Equal(p.nonzero, []int{0, 2}) {
		t.Errorf("counts %v nonzero %v, want [2 0 1 0] [0 2]", p.counts, p.nonzero)
	}
	if got := p.buf[p.offList:]; !slices.Equal(got, []int32{0, 2}) {
		t.Errorf("list in the buffer %v, want [0 2]", got)
	}
	if p.offList != p.offW+p.entries {
		t.Errorf("list at %d, want right after the weights (%d)", p.offList, p.offW+p.entries)
	}
}

// TestKeptSize: kept buffers grow by powers of two up to the cap, never below the need. No GPU needed.
func TestKeptSize(t *testing.T) {
	for _, c := range []struct{ n, most, want int }{
		{1, 16, 1}, {3, 16, 4}, {16, 16, 16}, {9, 16, 16}, {17, 16, 17}, {300, 4096, 512}, {4096, 4096, 4096}, {3000, 2048, 3000},
	} {
		if got := keptSize(c.n, c.most); got != c.want {
			t.Errorf("keptSize(%d, %d) = %d, want %d", c.n, c.most, got, c.want)
		}
	}
}
