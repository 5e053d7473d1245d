package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// ffnWeights are the three weights of a SiTU-GLU FFN of width ffn over hidden.
type ffnWeights struct {
	gate, up, down ops.Tensor
}

// newFFNWeights uploads random bfloat16 weights, scaled so that gate and up outputs spread over SiTU's
// knees (|gate| up to ~8 for inputs of scale 1) and the down outputs stay of order 1.
func newFFNWeights(t testing.TB, b *Backend, rng *rand.Rand, ffn, hidden int) ffnWeights {
	t.Helper()
	s := 2 / math.Sqrt(float64(hidden))
	w := ffnWeights{bf16Weight(t, b, rng, ffn, hidden, s), bf16Weight(t, b, rng, ffn, hidden, 4*s),
		bf16Weight(t, b, rng, hidden, ffn, 1/math.Sqrt(float64(ffn)))}
	t.Cleanup(func() { b.Free(w.gate); b.Free(w.up); b.Free(w.down) })
	return w
}

// ffnPath returns why SiTUFFN would run the unfused ops for these arguments ("" when it fuses).
func ffnPath(t testing.TB, b *Backend, x ops.Tensor, w ffnWeights) string {
	t.Helper()
	_, _, why, err := b.ffnFusable(x, w.gate, w.up, w.down, 4, 25)
	if err != nil {
		t.Fatal(err)
	}
	return why
}

// ffnBoth runs SiTUFFN and the unfused ops on x and returns both results on the host.
func ffnBoth(t testing.TB, b *Backend, x ops.Tensor, w ffnWeights) (fused, unfused []float32) {
	t.Helper()
	return ffnHost(t, b, x, w, true), ffnHost(t, b, x, w, false)
}

// ffnHost runs SiTUFFN (fused) or the unfused ops on x and returns the result on the host.
func ffnHost(t testing.TB, b *Backend, x ops.Tensor, w ffnWeights, fused bool) []float32 {
	t.Helper()
	var y ops.Tensor
	var err error
	if fused {
		y, err = b.SiTUFFN(x, w.gate, w.up, w.down, 4, 25)
	} else {
		y, err = b.situFFNUnfused(x, w.gate, w.up, w.down, 4, 25)
	}
	if err != nil {
		t.Fatalf("fused %v: %v", fused, err)
	}
	defer b.Free(y)
	v, err := b.ToHost(y)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// ffnInput is n rows of hidden bfloat16 values of scale 1, with an infinity in the middle row and a NaN
// in the next (from 3 rows on): infinite and NaN gate and up values go through SiTU's tables and through
// k_situ alike.
func ffnInput(rng *rand.Rand, n, hidden int) []float32 {
	v := fastFill(rng, n*hidden, 1)
	if n > 2 {
		v[(n/2)*hidden+3] = float32(math.Inf(1))
		v[(n/2+1)*hidden+5] = float32(math.NaN())
	}
	return v
}

// TestSiTUFFNBits: in BF16 precision on cuBLASLt the fused FFN equals MatMul, MatMul, SiTUGLU, MatMul bit
// for bit, at small widths (rows 1, 63, 65, 129, 4097) and at K3's (the shared experts' 6144 and the
// dense FFN's 33792 over 7168, a few thousand rows), with the default blocks of rows and with small ones;
// and it is batch invariant: 65 rows at offset 37, and the last row, computed alone equal their rows of
// the whole call.
func TestSiTUFFNBits(t *testing.T) {
	b := newLtBackend(t, true)
	small := []int{1, 63, 65, 129, 4097}
	for _, c := range []struct {
		ffn, hidden int
		rows        []int
		blocks      []int // Backend.ffnRows values (0: the default)
		k3          bool  // a K3 shape: the fused path must run
	}{
		{96, 64, small, []int{0, 64}, false},
		{200, 136, small, []int{0, 64}, false},
		{6144, 7168, []int{1, 65, 3000}, []int{0, 1024}, true},
		{33792, 7168, []int{1, 65, 3000}, []int{0, 1024}, true},
	} {
		t.Run(fmt.Sprintf("%dx%d", c.ffn, c.hidden), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(c.ffn), uint64(c.hidden)))
			w := newFFNWeights(t, b, rng, c.ffn, c.hidden)
			for _, n := range c.rows {
				xv := ffnInput(rng, n, c.hidden)
				x, err := b.FromHost(n, c.hidden, xv)
				if err != nil {
					t.Fatal(err)
				}
				if why := ffnPath(t, b, x, w); why != "" {
					if c.k3 {
						t.Fatalf("K3 shape %dx%d runs unfused: %s", c.ffn, c.hidden, why)
					}
					t.Logf("%d rows: unfused (%s)", n, why)
				}
				unfused := ffnHost(t, b, x, w, false)
				for _, blk := range c.blocks {
					b.ffnRows = blk
					what := fmt.Sprintf("%d rows, blocks of %d", n, ffnBlock(n, ffnBlockRows(c.ffn, blk)))
					fused := ffnHost(t, b, x, w, true)
					sameBits(t, what+": fused vs unfused", fused, unfused, c.hidden)
					if n < 100 {
						continue
					}
					for _, part := range [][2]int{{37, 65}, {n - 1, 1}} {
						r0, rn := part[0], part[1]
						xs, err := b.FromHost(rn, c.hidden, xv[r0*c.hidden:(r0+rn)*c.hidden])
						if err != nil {
							t.Fatal(err)
						}
						alone := ffnHost(t, b, xs, w, true)
						b.Free(xs)
						sameBits(t, fmt.Sprintf("%s: rows %d..%d alone vs in the call", what, r0, r0+rn-1), alone, fused[r0*c.hidden:(r0+rn)*c.hidden], c.hidden)
					}
				}
				b.ffnRows = 0
				b.Free(x)
			}
		})
	}
}

// TestSiTUFFNFallback: where the fused path does not run (FP32 precision, cuBLASLt off, NoTensorCores,
// float32 weights, a width that is not a multiple of 8), SiTUFFN still equals the unfused ops bit for bit;
// and shapes that do not chain fail as the unfused ops do.
func TestSiTUFFNFallback(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("CUDA backend not available on this machine: %v", err)
	}
	const n, ffn, hidden = 65, 96, 64
	for _, c := range []struct {
		name string
		opts Options
		ffn  int
		f32  bool // float32 weights
	}{
		{"fp32", Options{Precision: ops.FP32, Sync: true}, ffn, false},
		{"bf16 cuBLASLt off", Options{Precision: ops.BF16, Sync: true, CuBLASLt: CuBLASLtOff}, ffn, false},
		{"bf16 no tensor cores", Options{Precision: ops.BF16, Sync: true, NoTensorCores: true}, ffn, false},
		{"bf16 float32 weights", Options{Precision: ops.BF16, Sync: true}, ffn, true},
		{"bf16 width 100", Options{Precision: ops.BF16, Sync: true}, 100, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := testBackend(t, c.opts)
			rng := rand.New(rand.NewPCG(3, uint64(c.ffn)))
			var w ffnWeights
			if c.f32 {
				s := 2 / math.Sqrt(hidden)
				w = ffnWeights{f32Weight(t, b, rng, c.ffn, hidden, s), f32Weight(t, b, rng, c.ffn, hidden, 4*s), f32Weight(t, b, rng, hidden, c.ffn, 0.1)}
				t.Cleanup(func() { b.Free(w.gate); b.Free(w.up); b.Free(w.down) })
			} else {
				w = newFFNWeights(t, b, rng, c.ffn, hidden)
			}
			x, err := b.FromHost(n, hidden, ffnInput(rng, n, hidden))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free(x)
			why := ffnPath(t, b, x, w)
			if why == "" {
				t.Fatalf("the fused path would run")
			}
			t.Logf("unfused: %s", why)
			fused, unfused := ffnBoth(t, b, x, w)
			sameBits(t, "SiTUFFN vs the unfused ops", fused, unfused, hidden)
			// down transposed: its shape does not chain; the error is the down MatMul's
			_, err = b.SiTUFFN(x, w.gate, w.up, w.gate, 4, 25)
			if err == nil || !strings.Contains(err.Error(), "down") {
				t.Errorf("down of the wrong shape: got error %v, want the down MatMul's", err)
			}
		})
	}
}

// f32Weight uploads a random rows x cols float32 weight (bfloat16 values).
func f32Weight(t testing.TB, b *Backend, rng *rand.Rand, rows, cols int, scale float64) ops.Tensor {
	t.Helper()
	v := fastFill(rng, rows*cols, scale)
	raw := make([]byte, 4*len(v))
	for i, f := range v {
		u := math.Float32bits(f)
		raw[4*i], raw[4*i+1], raw[4*i+2], raw[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	w, err := b.Upload(ops.WeightF32, rows, cols, raw)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestSiTUFFNTiming times the fused FFN against the unfused ops at K3's sizes (hidden 7168): the dense FFN
// (width 33792) at 16,384 and 65,536 rows and a shared expert (width 6144) at 65,536, checks that both give
// the same bits there, and logs the op profile of one call each (skipped with -short). FLOP count: three
// GEMMs of 2 * rows * width * hidden. Host-timed around a device synchronisation, median of 5.
func TestSiTUFFNTiming(t *testing.T) {
	skipTiming(t)
	b := newLtBackend(t, false)
	const hidden = 7168
	rng := rand.New(rand.NewPCG(5, 6))
	weights := map[int]ffnWeights{}
	for _, c := range []struct{ n, ffn int }{{16384, 33792}, {65536, 33792}, {65536, 6144}} {
		w, ok := weights[c.ffn]
		if !ok {
			w = newFFNWeights(t, b, rng, c.ffn, hidden)
			weights[c.ffn] = w
		}
		x, err := b.FromHost(c.n, hidden, fastFill(rng, c.n*hidden, 1))
		if err != nil {
			t.Fatal(err)
		}
		if why := ffnPath(t, b, x, w); why != "" {
			t.Fatalf("%dx%d runs unfused: %s", c.ffn, hidden, why)
		}
		name := fmt.Sprintf("%d rows x %d x %d", c.n, c.ffn, hidden)
		flop := 6 * float64(c.n) * float64(c.ffn) * hidden
		var ms [2]float64
		for i, fused := range []bool{true, false} {
			med := medianTime(t, b, 5, func() error {
				var y ops.Tensor
				var err error
				if fused {
					y, err = b.SiTUFFN(x, w.gate, w.up, w.down, 4, 25)
				} else {
					y, err = b.situFFNUnfused(x, w.gate, w.up, w.down, 4, 25)
				}
				b.Free(y)
				return err
			})
			ms[i] = float64(med.Microseconds()) / 1e3
			t.Logf("TIMING SiTUFFN %-26s %-8s %9.3f ms %7.1f TFLOP/s", name, map[bool]string{true: "fused", false: "unfused"}[fused], ms[i], flop/med.Seconds()/1e12)
		}
		t.Logf("TIMING SiTUFFN %-26s unfused / fused = %.3f (%.1f ms saved)", name, ms[1]/ms[0], ms[1]-ms[0])
		if c.n == 65536 && c.ffn == 33792 { // larger blocks of rows (the scratch bound ffnScratchBytes sets the default)
			for _, rows := range []int{7936, 15872} {
				b.ffnRows = rows
				med := medianTime(t, b, 5, func() error { y, err := b.SiTUFFN(x, w.gate, w.up, w.down, 4, 25); b.Free(y); return err })
				t.Logf("TIMING SiTUFFN %-26s blocks of at most %5d rows (default %d) %9.3f ms %7.1f TFLOP/s", name, rows,
					ffnBlock(c.n, ffnBlockRows(c.ffn, 0)), float64(med.Microseconds())/1e3, flop/med.Seconds()/1e12)
			}
			b.ffnRows = 0
		}
		fused, unfused := ffnBoth(t, b, x, w)
		sameBits(t, name+": fused vs unfused", fused, unfused, hidden)
		logFFNProfile(t, b, name, x, w)
		b.Free(x)
	}
}

// logFFNProfile logs the op profile (ops.OpProfiler) of one fused and one unfused call: what
// `potato bench --op-profile` shows for them.
func logFFNProfile(t *testing.T, b *Backend, name string, x ops.Tensor, w ffnWeights) {
	t.Helper()
	if err := b.ProfileOps(true); err != nil {
		t.Fatal(err)
	}
	for _, f := range []func(x, gate, up, down ops.Tensor, beta, linBeta float32) (ops.Tensor, error){b.SiTUFFN, b.situFFNUnfused} {
		y, err := f(x, w.gate, w.up, w.down, 4, 25)
		if err != nil {
			t.Fatal(err)
		}
		b.Free(y)
		if err := b.ProfileMark(""); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.ProfileOps(false); err != nil {
		t.Fatal(err)
	}
	spans, err := b.OpProfile()
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range spans {
		for _, o := range s.Ops {
			t.Logf("TIMING   profile %-26s %-8s %-24s %3d calls %9.3f ms", name, []string{"fused", "unfused"}[min(i, 1)], o.Op, o.Calls, o.Seconds*1e3)
		}
	}
	if len(spans) < 1 {
		t.Fatalf("no profile spans")
	}
	var keys []string
	for _, o := range spans[0].Ops {
		if o.Op != "Free" {
			keys = append(keys, o.Op)
		}
	}
	if want := fmt.Sprintf("SiTUFFN %dx%d", w.gate.Rows(), w.gate.Cols()); len(keys) != 1 || keys[0] != want {
		t.Errorf("the fused call's profile: %v, want [%s] (and Free)", keys, want)
	}
}

// TestSiTUFFNScratch: where SiTUFFNScratchBytes says a call's scratch is bounded, a fused call at K3's
// dense width over more rows than one block (the plan's count of ops.SiTUFFNScratch) adds at most its
// output and that scratch to the pool (the op profile's memory, ops.OpTime.MemOwn); and FP32 precision,
// whose calls run the unfused ops, says it is not bounded.
func TestSiTUFFNScratch(t *testing.T) {
	b := newLtBackend(t, false)
	if !b.async {
		t.Skip("no stream-ordered pool on this device: the op's memory is not measured")
	}
	const hidden, ffn = 7168, 33792
	scratch, ok := b.SiTUFFNScratchBytes(hidden, ffn)
	if !ok {
		t.Fatalf("SiTUFFNScratchBytes(%d, %d) not bounded on cuBLASLt in BF16 precision", hidden, ffn)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	w := newFFNWeights(t, b, rng, ffn, hidden)
	n := ffnBlockRows(ffn, 0) + 1000 // two blocks
	x, err := b.FromHost(n, hidden, fastFill(rng, n*hidden, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(x)
	if why := ffnPath(t, b, x, w); why != "" {
		t.Fatalf("runs unfused: %s", why)
	}
	spans := profiled(t, b, func() {
		y, err := b.SiTUFFN(x, w.gate, w.up, w.down, 4, 25)
		if err != nil {
			t.Fatal(err)
		}
		b.Free(y)
	})
	var own int64
	for _, s := range spans {
		for _, o := range s.Ops {
			if strings.HasPrefix(o.Op, "SiTUFFN") {
				own = max(own, o.MemOwn)
			}
		}
	}
	out := int64(4 * n * hidden)
	if own == 0 || own > out+scratch {
		t.Errorf("SiTUFFN over %d rows took %d bytes of its own: want some, at most its output %d and the declared scratch %d", n, own, out, scratch)
	}
	t.Logf("SiTUFFN %d rows x %d x %d: %d bytes of its own, output %d + scratch %d", n, ffn, hidden, own, out, scratch)
	fp32 := testBackend(t, Options{Precision: ops.FP32})
	if _, ok := fp32.SiTUFFNScratchBytes(hidden, ffn); ok {
		t.Error("FP32 precision says its SiTUFFN scratch is bounded: its calls run the unfused ops")
	}
}
