package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestNorm2Kernels: the choice of norm.cu's version 2 instance by width (no GPU needed): one warp a
// group up to 1,024 values, a block beyond, chunks a thread the smallest power of two that covers the
// width, version 1 for widths that are not a multiple of 4, wider than 8,192 or misaligned.
func TestNorm2Kernels(t *testing.T) {
	for _, c := range []struct {
		g, groups int
		ptr       uint64
		name      string
		grid      int
	}{
		{4, 10, 0, "k_rmsnorm2_w1_c1", 2}, {128, 16, 0, "k_rmsnorm2_w1_c1", 2}, {132, 17, 0, "k_rmsnorm2_w1_c2", 3},
		{512, 8, 0, "k_rmsnorm2_w1_c4", 1}, {1024, 9, 0, "k_rmsnorm2_w1_c8", 2}, {1028, 9, 0, "k_rmsnorm2_w8_c2", 9},
		{1536, 3, 0, "k_rmsnorm2_w8_c2", 3}, {3584, 3, 0, "k_rmsnorm2_w8_c4", 3}, {7168, 5, 0, "k_rmsnorm2_w8_c8", 5},
		{8192, 5, 0, "k_rmsnorm2_w8_c8", 5}, {8196, 5, 0, "", 0}, {6, 5, 0, "", 0}, {128, 5, 8, "", 0},
	} {
		name, grid, ok := rmsnorm2Kernel(c.g, c.groups, 256, 512+c.ptr)
		if ok != (c.name != "") || name != c.name || grid != c.grid {
			t.Errorf("g %d, %d groups, offset %d: %q grid %d (%v), want %q grid %d", c.g, c.groups, c.ptr, name, grid, ok, c.name, c.grid)
		}
		aname, aok := attnres2Kernel(c.g, 256, 512+c.ptr)
		if c.g > 1024 && c.name != "" && aname != "k_attnres2_c"+c.name[len(c.name)-1:] {
			t.Errorf("AttnResMix, %d columns: %q (%v), want the block instance of %q", c.g, aname, aok, c.name)
		}
		if aok != (c.name != "") {
			t.Errorf("AttnResMix, %d columns, offset %d: version 2 %v, want %v", c.g, c.ptr, aok, c.name != "")
		}
	}
}

// TestFFNBlock: the fused FFN's rows split into as few blocks as the bound allows, each a multiple of 64
// rows and at most the bound, covering every row (no GPU needed).
func TestFFNBlock(t *testing.T) {
	for _, c := range []struct{ n, most, want int }{
		{1, 3968, 1}, {3968, 3968, 3968}, {3969, 3968, 1984 + 64}, {65536, 3968, 3904}, {16384, 3968, 3328},
		{129, 64, 64}, {4097, 64, 64}, {3000, 1024, 1024}, {65536, 21824, 16384},
	} {
		got := ffnBlock(c.n, c.most)
		blocks := (c.n + got - 1) / got
		if got != c.want || got > c.most || (c.n > c.most && got%64 != 0) || blocks*got < c.n {
			t.Errorf("ffnBlock(%d, %d) = %d (%d blocks), want %d", c.n, c.most, got, blocks, c.want)
		}
	}
}

// TestNorm2AgainstCPU: RMSNorm, GatedRMSNorm and AttnResMix (norm.cu version 2 where the width allows,
// version 1 else) within TestAgainstCPU's bounds of the CPU backend, in both precisions, at widths that
// take each instance (and a fallback), 1 and 65 rows; every row of the 65 equal, bit for bit, to itself
// computed alone (row 0 and row 64 at the end of the wave); and Add (k_add4) and Gather (k_gather4)
// equal to the CPU backend's bits.
func TestNorm2AgainstCPU(t *testing.T) {
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		b := testBackend(t, Options{Precision: prec, Sync: true})
		c := cpu.New(cpu.Options{Precision: prec})
		relBound, frac := 1e-5, 1.0
		if prec == ops.BF16 {
			relBound, frac = 1.0/64, 0.05
		}
		rng := rand.New(rand.NewPCG(21, uint64(prec)))
		for _, width := range []int{4, 96, 128, 132, 1028, 3584, 7168, 8192, 8196} {
			for _, rows := range []int{1, 65} {
				name := fmt.Sprintf("%v/%dx%d", prec, rows, width)
				x := normPair(t, b, c, rows, width, 2, rng)
				gate := normPair(t, b, c, rows, width, 3, rng)
				w := normPair(t, b, c, 1, width, 1, rng)
				for _, gated := range []bool{false, true} {
					run := func(be ops.Backend, x, w, g ops.Tensor) (ops.Tensor, error) {
						if gated {
							return be.GatedRMSNorm(x, w, g, 1e-5)
						}
						return be.RMSNorm(x, w, 1e-5)
					}
					what := fmt.Sprintf("%s RMSNorm (gated %v)", name, gated)
					gy, err := run(b, x.g, w.g, gate.g)
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					cy, err := run(c, x.c, w.c, gate.c)
					if err != nil {
						t.Fatalf("%s: cpu: %v", what, err)
					}
					gv, cv := hostPair(t, b, c, gy, cy)
					nearCPU(t, what, gv, cv, frac, relBound)
					for _, r := range []int{0, rows - 1} {
						xr, gr := normRow(t, b, x.v, width, r), normRow(t, b, gate.v, width, r)
						alone, err := run(b, xr, w.g, gr)
						if err != nil {
							t.Fatal(err)
						}
						av, _ := b.ToHost(alone)
						sameBits(t, fmt.Sprintf("%s: row %d alone vs in the wave", what, r), av, gv[r*width:(r+1)*width], width)
						b.Free(alone)
						b.Free(xr)
						b.Free(gr)
					}
					b.Free(gy)
				}
				for _, n := range []int{1, 2, 3} {
					what := fmt.Sprintf("%s AttnResMix of %d", name, n)
					var gvs, cvs []ops.Tensor
					var hv [][]float32
					for i := range n {
						v := normPair(t, b, c, rows, width, 0.5+float64(i), rng)
						gvs, cvs, hv = append(gvs, v.g), append(cvs, v.c), append(hv, v.v)
					}
					// scores of order 3 at every width, as TestAgainstCPU's at 128 columns (a score is a sum of
					// width products); their float32 rounding still grows with the sum's length, so the
					// bounds on the weights (and, in FP32, on the output) grow as sqrt(width / 128)
					wg := normPair(t, b, c, 1, width, 0.3*math.Sqrt(128/float64(width)), rng)
					grow := max(1, math.Sqrt(float64(width)/128))
					gy, gp, err := b.AttnResMix(gvs, wg.g)
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					cy, cp, err := c.AttnResMix(cvs, wg.c)
					if err != nil {
						t.Fatalf("%s: cpu: %v", what, err)
					}
					gv, cv := hostPair(t, b, c, gy, cy)
					outBound := relBound
					if prec == ops.FP32 {
						outBound *= grow
					}
					nearCPU(t, what, gv, cv, frac, outBound)
					nearCPU(t, what+" weights", gp, cp, 1, 1e-5*grow)
					r := rows - 1
					var rowT []ops.Tensor
					for i := range n {
						rowT = append(rowT, normRow(t, b, hv[i], width, r))
					}
					alone, ap, err := b.AttnResMix(rowT, wg.g)
					if err != nil {
						t.Fatal(err)
					}
					av, _ := b.ToHost(alone)
					sameBits(t, fmt.Sprintf("%s: row %d alone vs in the wave", what, r), av, gv[r*width:], width)
					sameBits(t, fmt.Sprintf("%s: row %d's weights alone vs in the wave", what, r), ap, gp[r*n:], n)
					for _, x := range append(rowT, alone, gy) {
						b.Free(x)
					}
					for _, x := range gvs {
						b.Free(x)
					}
				}
				a2 := normPair(t, b, c, rows, width, 3, rng)
				gy, err := b.Add(x.g, a2.g)
				if err != nil {
					t.Fatal(err)
				}
				cy, err := c.Add(x.c, a2.c)
				if err != nil {
					t.Fatal(err)
				}
				gv, cv := hostPair(t, b, c, gy, cy)
				sameBits(t, name+" Add", gv, cv, width)
				b.Free(gy)
			}
			// Gather from a bfloat16 table (k_gather4 where width % 4 == 0)
			tab := bf16Weight(t, b, rng, 50, width, 1)
			ids := []int32{3, 49, 0, 3, 17}
			gy, err := b.Gather(tab, ids)
			if err != nil {
				t.Fatal(err)
			}
			gv, _ := b.ToHost(gy)
			full, _ := b.ToHost(tab)
			for i, id := range ids {
				sameBits(t, fmt.Sprintf("%v Gather width %d, id %d", prec, width, id), gv[i*width:(i+1)*width], full[int(id)*width:(int(id)+1)*width], width)
			}
			b.Free(gy)
			b.Free(tab)
		}
	}
}

// normPairT is one activation on both backends and its host values.
type normPairT struct {
	g, c ops.Tensor
	v    []float32
}

func normPair(t *testing.T, b *Backend, c ops.Backend, rows, cols int, scale float64, rng *rand.Rand) normPairT {
	t.Helper()
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = float32(scale * rng.NormFloat64())
	}
	g, err := b.FromHost(rows, cols, v)
	if err != nil {
		t.Fatal(err)
	}
	ct, err := c.FromHost(rows, cols, v)
	if err != nil {
		t.Fatal(err)
	}
	return normPairT{g, ct, v}
}

// normRow uploads row r of host values v (cols wide) as a one-row tensor.
func normRow(t *testing.T, b *Backend, v []float32, cols, r int) ops.Tensor {
	t.Helper()
	x, err := b.FromHost(1, cols, v[r*cols:(r+1)*cols])
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func hostPair(t *testing.T, b *Backend, c ops.Backend, g, ct ops.Tensor) ([]float32, []float32) {
	t.Helper()
	gv, err := b.ToHost(g)
	if err != nil {
		t.Fatal(err)
	}
	cv, err := c.ToHost(ct)
	if err != nil {
		t.Fatal(err)
	}
	return gv, cv
}

// nearCPU is compare_test.go's near: at most maxFrac of the values may differ from the CPU backend's bits,
// each by at most maxRel of (|value| + the output's RMS).
func nearCPU(t *testing.T, what string, g, c []float32, maxFrac, maxRel float64) {
	t.Helper()
	var ss float64
	for _, x := range c {
		ss += float64(x) * float64(x)
	}
	floor := math.Sqrt(ss / float64(max(len(c), 1)))
	n, rel := 0, 0.0
	for i := range c {
		if math.Float32bits(g[i]) != math.Float32bits(c[i]) {
			n++
			rel = max(rel, math.Abs(float64(g[i])-float64(c[i]))/(math.Abs(float64(c[i]))+floor))
		}
	}
	if float64(n) > maxFrac*float64(len(c)) || rel > maxRel {
		t.Errorf("%s: %d of %d values differ from the CPU backend (at most %.0f%% may), max rel diff %.3g (at most %.3g)", what, n, len(c), 100*maxFrac, rel, maxRel)
	}
}

// TestNormTiming times norm.cu's versions 1 and 2 and elementwise.cu's Add and Gather forms at K3's
// sizes for 65,536 rows: RMSNorm over 7,168, GatedRMSNorm in groups of 128 over 12,288, AttnResMix of 2
// and 9 vectors of 7,168. Bytes: each value read once and written once (the floor; version 1 reads the
// normalised values twice), reported as the rate of those bytes. Skipped with -short.
func TestNormTiming(t *testing.T) {
	skipTiming(t)
	b := testBackend(t, Options{Precision: ops.BF16})
	rng := rand.New(rand.NewPCG(31, 32))
	const rows = 65536
	act := func(cols int) ops.Tensor {
		x, err := b.FromHost(rows, cols, fastFill(rng, rows*cols, 1))
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	wide, heads, gate := act(7168), act(12288), act(12288)
	w7, w128 := bf16Weight(t, b, rng, 1, 7168, 1), bf16Weight(t, b, rng, 1, 128, 1)
	vs := []ops.Tensor{wide}
	for range 8 {
		vs = append(vs, act(7168))
	}
	for _, c := range []struct {
		name  string
		bytes float64
		fn    func() (ops.Tensor, error)
	}{
		{"RMSNorm 65536 x 7168", 8 * rows * 7168, func() (ops.Tensor, error) { return b.RMSNorm(wide, w7, 1e-5) }},
		{"GatedRMSNorm 65536 x 12288 (128)", 12 * rows * 12288, func() (ops.Tensor, error) { return b.GatedRMSNorm(heads, w128, gate, 1e-5) }},
		{"AttnResMix of 2, 65536 x 7168", 12 * rows * 7168, func() (ops.Tensor, error) { y, _, err := b.AttnResMix(vs[:2], w7); return y, err }},
		{"AttnResMix of 9, 65536 x 7168", 40 * rows * 7168, func() (ops.Tensor, error) { y, _, err := b.AttnResMix(vs, w7); return y, err }},
	} {
		var ms [2]float64
		for i, ver := range []int{1, 2} {
			b.normVer = ver
			med := medianTime(t, b, 5, func() error { y, err := c.fn(); b.Free(y); return err })
			ms[i] = float64(med.Microseconds()) / 1e3
			t.Logf("TIMING %-36s version %d %8.3f ms %6.2f TB/s", c.name, ver, ms[i], c.bytes/med.Seconds()/1e12)
		}
		b.normVer = 0
		t.Logf("TIMING %-36s version 1 / version 2 = %.2f", c.name, ms[0]/ms[1])
	}
	other := act(7168)
	med := medianTime(t, b, 5, func() error { y, err := b.Add(wide, other); b.Free(y); return err })
	t.Logf("TIMING %-36s k_add4 %8.3f ms %6.2f TB/s", "Add 65536 x 7168", float64(med.Microseconds())/1e3, 12*rows*7168/med.Seconds()/1e12)
	table := bf16Weight(t, b, rng, 163840, 7168, 1)
	ids := make([]int32, rows)
	for i := range ids {
		ids[i] = int32(rng.IntN(163840))
	}
	med = medianTime(t, b, 5, func() error { y, err := b.Gather(table, ids); b.Free(y); return err })
	t.Logf("TIMING %-36s k_gather4 %8.3f ms %6.2f TB/s", "Gather 65536 of 163840 x 7168 bf16", float64(med.Microseconds())/1e3, 6*rows*7168/med.Seconds()/1e12)
	for _, x := range append(vs, heads, gate, w7, w128, other, table) {
		b.Free(x)
	}
}
