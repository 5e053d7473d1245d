package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// The grouped expert path (experts.go, kernels/experts.cu) against the per-expert path, its oracle: the
// same bits, whatever the experts' row counts (0, 1, 63, 64, 65, 129, 300: inside and across the
// 128-row tiles and 16-row mma groups), the shapes (column and k tails) and the expert subsets of the calls.

// TestPlanGrouped: the tile table covers every expert's rows in tiles of at most 128, and each
// accumulator row lists its (row, expert) entries in ascending expert id, with its weights. No GPU needed.
func TestPlanGrouped(t *testing.T) {
	es := []*Expert{{id: 1}, {id: 4}, {id: 9}}
	work := []ops.ExpertRows{
		{Rows: []int32{0, 2, 5}, Weights: []float32{.1, .2, .3}},
		{},
		{Rows: make([]int32, 130), Weights: make([]float32, 130)},
	}
	for i := range work[2].Rows {
		work[2].Rows[i], work[2].Weights[i] = int32(i+2), float32(i)
	}
	p := planGrouped(es, work, 140)
	if p.rows != 133 || p.tiles != 3 || p.touched != 131 {
		t.Fatalf("rows %d, tiles %d, touched %d: want 133, 3, 131", p.rows, p.tiles, p.touched)
	}
	tiles := p.buf[p.offTiles:p.offRows]
	if want := []int32{0, 0, 3, 0, 2, 3, 128, 0, 2, 131, 2, 0}; !slices.Equal(tiles, want) {
		t.Errorf("tiles %v, want %v", tiles, want)
	}
	rowptr := p.buf[p.offRowPtr:p.offRowID]
	rowid := p.buf[p.offRowID:p.offPos]
	pos, w := p.buf[p.offPos:p.offW], p.buf[p.offW:]
	// row 2: expert 1 (position 1, weight .2), then expert 9 (position 3, weight 0)
	i := slices.Index(rowid, 2)
	if i < 0 || rowptr[i+1]-rowptr[i] != 2 {
		t.Fatalf("row 2: index %d in rowid %v", i, rowid[:4])
	}
	e := rowptr[i]
	if pos[e] != 1 || math.Float32frombits(uint32(w[e])) != .2 || pos[e+1] != 3 || w[e+1] != 0 {
		t.Errorf("row 2 entries: pos %v weights %v", pos[e:e+2], w[e:e+2])
	}
	if !slices.IsSorted(rowid) || rowptr[len(rowptr)-1] != int32(p.entries) {
		t.Errorf("rowid not ascending or rowptr does not end at %d", p.entries)
	}
}

// TestPlanGroupedTiles: the wgmma kernels' tile table (tiles of at most 256 rows) covers each expert's
// rows in order; the rest of the plan does not depend on the tile size. No GPU needed.
func TestPlanGroupedTiles(t *testing.T) {
	es := []*Expert{{id: 1}, {id: 4}, {id: 9}}
	work := []ops.ExpertRows{
		{Rows: make([]int32, 256), Weights: make([]float32, 256)},
		{Rows: []int32{7}, Weights: []float32{1}},
		{Rows: make([]int32, 600), Weights: make([]float32, 600)},
	}
	for i := range work[0].Rows {
		work[0].Rows[i] = int32(i)
	}
	for i := range work[2].Rows {
		work[2].Rows[i] = int32(i)
	}
	for _, c := range []struct {
		tileRows int
		want     []int32
	}{
		{256, []int32{0, 0, 256, 0, 1, 256, 1, 0, 2, 257, 256, 0, 2, 513, 256, 0, 2, 769, 88, 0}},
		{128, []int32{0, 0, 128, 0, 0, 128, 128, 0, 1, 256, 1, 0, 2, 257, 128, 0, 2, 385, 128, 0, 2, 513, 128, 0,
			2, 641, 128, 0, 2, 769, 88, 0}},
	} {
		p := planGroupedTiles(es, work, 600, c.tileRows)
		if got := p.buf[p.offTiles:p.offRows]; !slices.Equal(got, c.want) || p.tiles != len(c.want)/4 {
			t.Errorf("tiles of %d rows: %d tiles %v, want %v", c.tileRows, p.tiles, got, c.want)
		}
		ref := planGrouped(es, work, 600)
		if !slices.Equal(p.buf[:p.offTiles], ref.buf[:ref.offTiles]) || !slices.Equal(p.buf[p.offRows:], ref.buf[ref.offRows:]) {
			t.Errorf("tiles of %d rows: the plan's other tables differ from planGrouped's", c.tileRows)
		}
	}
}

// TestPlanGroupedParts: the plan laid out in parts (the accumulator's rows in 1 to 11 ranges, one
// goroutine each, more parts than rows included) is the one-part plan, table for table, on random
// routings and expert subsets, with tiles of 7, 128 and 256 rows. No GPU needed.
func TestPlanGroupedParts(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 30 {
		experts, k, rows := 1+rng.IntN(40), 1+rng.IntN(6), rng.IntN(3000)
		k = min(k, experts)
		rt := randRouting(rng, rows, k, experts, 0)
		var ids []int
		var es []*Expert
		for e := range experts {
			if rng.IntN(2) == 0 {
				ids = append(ids, e)
				es = append(es, &Expert{id: e, ptr: uint64(rng.Uint32()) << 8, off: [6]int{0, 16, 32, 48, 64, 80}})
			}
		}
		work, err := rt.AssignRows(ids, rows)
		if err != nil {
			t.Fatal(err)
		}
		acc, tileRows := rows+rng.IntN(5), []int{128, 256, 7}[trial%3]
		want := planGroupedParts(es, work, acc, tileRows, 1)
		for parts := 2; parts < 12; parts++ {
			if got := planGroupedParts(es, work, acc, tileRows, parts); !reflect.DeepEqual(got, want) {
				t.Fatalf("trial %d (%d rows, %d of %d experts), %d parts: the plan differs from one part's", trial, rows, len(es), experts, parts)
			}
		}
	}
}

// TestGroupedOK: the grouped path is BF16 on the tensor cores with whole scale groups only.
func TestGroupedOK(t *testing.T) {
	es := []*Expert{{ffn: 64}, {ffn: 64}}
	for _, c := range []struct {
		b      *Backend
		latent int
		es     []*Expert
		want   bool
	}{
		{&Backend{bf: 1}, 96, es, true},
		{&Backend{bf: 0}, 96, es, false},
		{&Backend{bf: 1, opts: Options{NoTensorCores: true}}, 96, es, false},
		{&Backend{bf: 1}, 80, es, false},
		{&Backend{bf: 1}, 96, []*Expert{{ffn: 64}, {ffn: 96}}, false},
		{&Backend{bf: 1}, 96, []*Expert{{ffn: 48}}, false},
	} {
		if got := c.b.groupedOK(c.latent, c.es); got != c.want {
			t.Errorf("bf %d, NoTensorCores %v, latent %d: groupedOK %v, want %v", c.b.bf, c.b.opts.NoTensorCores, c.latent, got, c.want)
		}
	}
}

// randExpertBytes returns an expert's six MXFP4 parts: random codes, scales mostly around 2^-6 with a
// few of every kind the decoder treats apart (0: a subnormal scale, 1, 2, 127, 128, 129, 140: two
// multiplies).
func randExpertBytes(rng *rand.Rand, latent, ffn int) [6][]byte {
	var parts [6][]byte
	for i := range 3 {
		rows, cols := ffn, latent
		if i == 2 {
			rows, cols = latent, ffn
		}
		packed, scales := make([]byte, rows*cols/2), make([]byte, rows*cols/32)
		for j := range packed {
			packed[j] = byte(rng.IntN(256))
		}
		special := []byte{0, 1, 2, 127, 128, 129, 140}
		for j := range scales {
			if rng.IntN(50) == 0 {
				scales[j] = special[rng.IntN(len(special))]
			} else {
				scales[j] = byte(118 + rng.IntN(4))
			}
		}
		parts[2*i], parts[2*i+1] = packed, scales
	}
	return parts
}

// guarded is an activation inside a buffer with rows of NaN before and after it (guard bands): a kernel
// that writes outside the tensor changes them.
type guarded struct {
	big   ops.Tensor
	view  *Tensor
	guard int
	cols  int
	init  []float32 // the big tensor's values as uploaded (the guard NaNs after FromHost's rounding)
}

func newGuarded(t *testing.T, b *Backend, v []float32, rows, cols int) *guarded {
	t.Helper()
	const guard = 3
	all := make([]float32, (rows+2*guard)*cols)
	for i := range all {
		all[i] = math.Float32frombits(0x7fc0_1234)
	}
	copy(all[guard*cols:], v)
	big, err := b.FromHost(rows+2*guard, cols, all)
	if err != nil {
		t.Fatal(err)
	}
	init, err := b.ToHost(big)
	if err != nil {
		t.Fatal(err)
	}
	bt := big.(*Tensor)
	view := &Tensor{b: b, ptr: bt.ptr + uint64(4*guard*cols), rows: rows, cols: cols, dt: dtF32}
	return &guarded{big: big, view: view, guard: guard, cols: cols, init: init}
}

// values returns the tensor's values and fails the test if a guard value changed.
func (g *guarded) values(t *testing.T, b *Backend, what string) []float32 {
	t.Helper()
	all, err := b.ToHost(g.big)
	if err != nil {
		t.Fatal(err)
	}
	n := g.guard * g.cols
	for _, i := range append(seq(0, n), seq(len(all)-n, len(all))...) {
		if math.Float32bits(all[i]) != math.Float32bits(g.init[i]) {
			t.Errorf("%s: guard value %d of %d changed: %#x, was %#x", what, i, len(all), math.Float32bits(all[i]), math.Float32bits(g.init[i]))
			break
		}
	}
	return all[n : len(all)-n]
}

func seq(from, to int) []int {
	s := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// sameBits fails the test if got differs from want in any bit, saying how many values differ and where
// the first few are (row, column).
func sameBits(t *testing.T, what string, got, want []float32, cols int) {
	t.Helper()
	var bad []string
	n := 0
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			if n < 6 {
				bad = append(bad, fmt.Sprintf("[%d,%d] %g want %g", i/cols, i%cols, got[i], want[i]))
			}
			n++
		}
	}
	if n > 0 {
		t.Errorf("%s: %d of %d values differ: %v", what, n, len(want), bad)
	} else {
		t.Logf("%s: %d values bit-identical", what, len(want))
	}
}

// TestExpertsGroupedBits: grouped calls (all experts at once, experts given out of order, and ascending
// subsets one call each) equal one per-expert call bit for bit, with guard bands around acc and z intact.
func TestExpertsGroupedBits(t *testing.T) {
	b := testBackend(t, Options{Precision: ops.BF16, Sync: true})
	const beta, linBeta = 4, 25
	counts := []int{0, 1, 63, 64, 65, 129, 300} // rows of each expert
	ids := []int{3, 4, 9, 10, 17, 22, 31}
	for _, sh := range []struct{ latent, ffn int }{{256, 192}, {96, 160}, {32, 32}} {
		t.Run(fmt.Sprintf("latent%d_ffn%d", sh.latent, sh.ffn), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(sh.latent), uint64(sh.ffn)))
			const rows = 307
			var es []ops.Expert
			for _, id := range ids {
				p := randExpertBytes(rng, sh.latent, sh.ffn)
				e, err := b.UploadExpert(id, sh.latent, sh.ffn, p[0], p[1], p[2], p[3], p[4], p[5])
				if err != nil {
					t.Fatal(err)
				}
				es = append(es, e)
			}
			defer func() {
				for _, e := range es {
					b.Free(e)
				}
			}()
			// Each row has K = 7 slots: the given experts that chose it and ids 100.. that no call holds,
			// in random order.
			k := len(ids)
			rt := ops.Routing{K: k, IDs: make([]int32, rows*k), Weights: make([]float32, rows*k)}
			chose := make([][]int, rows)
			for i, n := range counts {
				for _, r := range rng.Perm(rows)[:n] {
					chose[r] = append(chose[r], ids[i])
				}
			}
			for r := range rows {
				slots := append([]int(nil), chose[r]...)
				for j := len(slots); j < k; j++ {
					slots = append(slots, 100+j)
				}
				for j, s := range rng.Perm(k) {
					rt.IDs[r*k+j] = int32(slots[s])
					rt.Weights[r*k+j] = float32(0.05 + 0.9*rng.Float64())
				}
			}
			zv := make([]float32, rows*sh.latent)
			accv := make([]float32, rows*sh.latent)
			for i := range zv {
				zv[i] = float32(rng.NormFloat64())
				accv[i] = float32(0.1 * rng.NormFloat64())
			}
			z := newGuarded(t, b, zv, rows, sh.latent)
			run := func(what string, mode expertsMode, calls ...[]ops.Expert) []float32 {
				t.Helper()
				acc := newGuarded(t, b, accv, rows, sh.latent)
				defer b.Free(acc.big)
				for _, call := range calls {
					if err := b.expertsAccumulate(acc.view, z.view, rt, call, beta, linBeta, mode); err != nil {
						t.Fatalf("%s: %v", what, err)
					}
				}
				return acc.values(t, b, what)
			}
			want := run("per-expert", expertsPerExpert, es)
			shuffled := slices.Clone(es)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			sameBits(t, "grouped, one call", run("grouped", expertsGrouped, es), want, sh.latent)
			sameBits(t, "grouped (float32 decoder), one call", run("grouped f32", expertsGroupedF32, es), want, sh.latent)
			sameBits(t, "grouped, experts out of order", run("grouped shuffled", expertsGrouped, shuffled), want, sh.latent)
			sameBits(t, "grouped, subsets {3,4,9} {10} {17,22,31}",
				run("grouped subsets", expertsGrouped, es[:3], es[3:4], es[4:]), want, sh.latent)
			sameBits(t, "grouped, one expert a call",
				run("grouped singles", expertsGrouped, es[:1], es[1:2], es[2:3], es[3:4], es[4:5], es[5:6], es[6:]), want, sh.latent)
			zAfter := z.values(t, b, "z")
			sameBits(t, "z unchanged", zAfter, z.init[z.guard*sh.latent:len(z.init)-z.guard*sh.latent], sh.latent)
			b.Free(z.big)
		})
	}
}

// planGrouped is planGroupedTiles with the grouped kernels' row tiles (xTileRows), as the tests lay out
// calls.
func planGrouped(es []*Expert, work []ops.ExpertRows, accRows int) groupedPlan {
	return planGroupedTiles(es, work, accRows, xTileRows)
}
