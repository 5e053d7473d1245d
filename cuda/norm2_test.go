package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// negZero is -0 as a float32 (the literal -0.0 is +0 in Go).
var negZero = float32(math.Copysign(0, -1))

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

// TestGatedKernel: the gated form takes the gate-early instance for one warp a group of up to two chunks
// a thread, the usual one otherwise and with gateLate (no GPU needed).
func TestGatedKernel(t *testing.T) {
	for _, c := range []struct {
		name string
		late bool
		want string
	}{
		{"k_rmsnorm2_w1_c1", false, "k_rmsnorm2g_w1_c1"}, {"k_rmsnorm2_w1_c2", false, "k_rmsnorm2g_w1_c2"},
		{"k_rmsnorm2_w1_c4", false, "k_rmsnorm2_w1_c4"}, {"k_rmsnorm2_w8_c1", false, "k_rmsnorm2_w8_c1"},
		{"k_rmsnorm2_w1_c1", true, "k_rmsnorm2_w1_c1"},
	} {
		if got := gatedKernel(c.name, c.late); got != c.want {
			t.Errorf("gatedKernel(%q, %v) = %q, want %q", c.name, c.late, got, c.want)
		}
	}
}

// TestGatedRMSNormGateEarly: the gate-early instances (k_rmsnorm2g) give the bits of the usual ones, in
// both precisions, with the float32 output and the bfloat16 copy, at widths of one and two chunks a lane,
// with gates and values of every size (sigmoid's saturation, zeros) and rows that leave a block part
// empty.
func TestGatedRMSNormGateEarly(t *testing.T) {
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		b := testBackend(t, Options{Precision: prec, Sync: true})
		rng := rand.New(rand.NewPCG(7, uint64(prec)))
		for _, c := range []struct{ rows, cols, g int }{{1, 128, 128}, {13, 12288, 128}, {1000, 1536, 128}, {65, 256, 256}, {9, 132, 132}, {3, 96, 96}} {
			xv := fastFill(rng, c.rows*c.cols, 3)
			gv := fastFill(rng, c.rows*c.cols, 8)
			for i := 0; i < len(gv); i += 97 {
				gv[i] = []float32{0, negZero, 90, -90, 1e-30}[i%5]
				xv[i] = []float32{0, 1e-20, -3e4, 7, 1}[i%5]
			}
			x, err := b.FromHost(c.rows, c.cols, xv)
			if err != nil {
				t.Fatal(err)
			}
			gate, err := b.FromHost(c.rows, c.cols, gv)
			if err != nil {
				t.Fatal(err)
			}
			w := bf16Weight(t, b, rng, 1, c.g, 1)
			var outs [2][]float32
			for i, late := range []bool{false, true} {
				b.gateLate = late
				y, err := b.GatedRMSNorm(x, w, gate, 1e-5)
				if err != nil {
					t.Fatal(err)
				}
				if outs[i], err = b.ToHost(y); err != nil {
					t.Fatal(err)
				}
				b.Free(y)
			}
			b.gateLate = false
			what := fmt.Sprintf("%v %d x %d, groups of %d", prec, c.rows, c.cols, c.g)
			for i := range outs[0] {
				if math.Float32bits(outs[0][i]) != math.Float32bits(outs[1][i]) {
					t.Fatalf("%s: value %d: %g gate early, %g late", what, i, outs[0][i], outs[1][i])
				}
			}
			t.Logf("%s: the same bits (%d values)", what, len(outs[0]))
			b.Free(x)
			b.Free(gate)
			b.Free(w)
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
	for n := 1; n <= len(vs); n++ { // the fused mix and norm's forms against the two ops (mixnorm.go)
		var ms [3]float64
		for i, form := range []string{"unfused", "v2", "v3"} {
			b.opts.UnfusedMixNorm, b.mixForm = form == "unfused", form
			if form == "unfused" {
				b.mixForm = ""
			}
			med := medianTime(t, b, 5, func() error { y, _, err := b.AttnResMixNorm(vs[:n], w7, w7, 1e-5, false); b.Free(y); return err })
			ms[i] = float64(med.Microseconds()) / 1e3
			t.Logf("TIMING %-36s %-7s %8.3f ms %6.2f TB/s", fmt.Sprintf("AttnResMixNorm of %d, 65536 x 7168", n), form, ms[i],
				float64((4*n+2)*rows*7168)/(ms[i]/1e3)/1e12)
		}
		b.opts.UnfusedMixNorm, b.mixForm = false, ""
		t.Logf("TIMING %-36s unfused / v2 = %.2f, v2 / v3 = %.2f", fmt.Sprintf("AttnResMixNorm of %d, 65536 x 7168", n),
			ms[0]/ms[1], ms[1]/ms[2])
	}
	med := medianTime(t, b, 5, func() error { y, err := b.MulSigmoid(heads, gate); b.Free(y); return err })
	t.Logf("TIMING %-36s k_mul_sigmoid %8.3f ms %6.2f TB/s", "MulSigmoid 65536 x 12288", float64(med.Microseconds())/1e3, 12*rows*12288/med.Seconds()/1e12)
	other := act(7168)
	med = medianTime(t, b, 5, func() error { y, err := b.Add(wide, other); b.Free(y); return err })
	t.Logf("TIMING %-36s k_add4 %8.3f ms %6.2f TB/s", "Add 65536 x 7168", float64(med.Microseconds())/1e3, 12*rows*7168/med.Seconds()/1e12)
	// an MoE layer's end: Add(p, Add(a, b)) as two Adds and as one AddSum (the floor 16 bytes a value)
	third := act(7168)
	two := medianTime(t, b, 5, func() error {
		ab, err := b.Add(other, third)
		if err != nil {
			return err
		}
		y, err := b.Add(wide, ab)
		b.Free(ab)
		b.Free(y)
		return err
	})
	med = medianTime(t, b, 5, func() error { y, err := b.AddSum(wide, other, third); b.Free(y); return err })
	t.Logf("TIMING %-36s k_add_sum4 %8.3f ms %6.2f TB/s; two Adds %8.3f ms", "AddSum 65536 x 7168", float64(med.Microseconds())/1e3,
		16*rows*7168/med.Seconds()/1e12, float64(two.Microseconds())/1e3)
	b.Free(third)
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
