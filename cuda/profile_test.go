package cuda_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/cuda"
	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestOpProfile: with op timing on, two MatMuls by one weight and one by another are reported under
// their weight shapes in the span their mark ends, with device times above zero; the setup ops form the
// span before; what follows the last mark forms a span ""; OpProfile clears; timing off records nothing.
func TestOpProfile(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			b := newBackendWith(t, cuda.Options{Precision: ops.BF16, Sync: sync})
			const n, k = 256, 512
			upload := func(rows int) ops.Tensor {
				return bf16Filled(t, b, rows, k, func(i int) float32 { return float32(i%7) / 64 })
			}
			if err := b.ProfileOps(true); err != nil {
				t.Fatal(err)
			}
			x, err := b.FromHost(n, k, make([]float32, n*k))
			if err != nil {
				t.Fatal(err)
			}
			w1, w2 := upload(1024), upload(128)
			if err := b.ProfileMark("setup"); err != nil {
				t.Fatal(err)
			}
			var ys []ops.Tensor
			for _, w := range []ops.Tensor{w1, w1, w2} {
				if w == w2 { // the device idles before this one: its IdleBefore holds the pause
					time.Sleep(30 * time.Millisecond)
				}
				y, err := b.MatMul(x, w)
				if err != nil {
					t.Fatal(err)
				}
				ys = append(ys, y)
			}
			if err := b.ProfileMark("matmuls"); err != nil {
				t.Fatal(err)
			}
			for _, y := range append(ys, x, w1, w2) {
				b.Free(y)
			}
			spans, err := b.OpProfile()
			if err != nil {
				t.Fatal(err)
			}
			if len(spans) != 3 || spans[0].Label != "setup" || spans[1].Label != "matmuls" || spans[2].Label != "" {
				t.Fatalf("spans %+v, want setup, matmuls and \"\"", spans)
			}
			got := map[string]ops.OpTime{}
			var sum float64
			for _, o := range spans[1].Ops {
				got[o.Op] = o
				sum += o.Seconds
			}
			for key, calls := range map[string]int{"MatMul 1024x512": 2, "MatMul 128x512": 1} {
				if o := got[key]; o.Calls != calls || !(o.Seconds > 0) || !(o.Host > 0) {
					t.Errorf("%s: %+v, want %d calls, device and host times above 0 (span %+v)", key, o, calls, spans[1])
				}
			}
			if o := got["MatMul 128x512"]; o.IdleBefore < 0.025 || o.IdleBefore > 5 || o.HostGap < 0.025 || o.HostGap > 5 {
				t.Errorf("MatMul 128x512 called 30 ms after the op before returned: idle before it %.6fs, host gap %.6fs, want about 0.03 each", o.IdleBefore, o.HostGap)
			}
			if len(got) != 2 || sum != spans[1].Seconds {
				t.Errorf("span matmuls: %+v, want two keys whose times sum to the span's", spans[1])
			}
			for i := 1; i < len(spans[1].Ops); i++ {
				if spans[1].Ops[i].Seconds > spans[1].Ops[i-1].Seconds {
					t.Errorf("span matmuls not sorted by time: %+v", spans[1].Ops)
				}
			}
			if s := spans[0]; len(s.Ops) != 2 || s.Ops[0].Calls+s.Ops[1].Calls != 3 {
				t.Errorf("span setup: %+v, want FromHost once and Upload twice", s)
			}
			for _, s := range spans[:2] { // a marked span's device time holds its ops (events resolve ~0.5 us)
				if !(s.Device > 0) || s.Device < s.Seconds-1e-5 {
					t.Errorf("span %q: device time %.6fs, ops %.6fs: want above 0 and at least the ops'", s.Label, s.Device, s.Seconds)
				}
			}
			if spans[2].Device != 0 {
				t.Errorf("the span after the last mark: device time %g, want 0 (no mark ends it)", spans[2].Device)
			}
			if s := spans[2]; len(s.Ops) != 1 || s.Ops[0].Op != "Free" || s.Ops[0].Calls != 6 {
				t.Errorf("span \"\": %+v, want Free 6 times", s)
			}
			t.Logf("%+v", spans)
			if spans, err := b.OpProfile(); err != nil || len(spans) != 0 {
				t.Errorf("OpProfile again: %+v, %v; want nothing", spans, err)
			}
			// Timing off: neither ops nor marks are recorded.
			if err := b.ProfileOps(false); err != nil {
				t.Fatal(err)
			}
			y, err := b.FromHost(1, 1, []float32{1})
			if err != nil {
				t.Fatal(err)
			}
			b.Free(y)
			if err := b.ProfileMark("off"); err != nil {
				t.Fatal(err)
			}
			if spans, err := b.OpProfile(); err != nil || len(spans) != 0 {
				t.Errorf("OpProfile with timing off: %+v, %v; want nothing", spans, err)
			}
		})
	}
}

// TestSpanProfile: span timing alone (ops.SpanProfiler) gives each marked span its device time, which
// holds the span's work (a 30 ms sleep between two marks with nothing queued leaves the device idle,
// and the span holds that too), and times no op.
func TestSpanProfile(t *testing.T) {
	b := newBackendWith(t, cuda.Options{Precision: ops.BF16})
	const n, k = 2048, 2048
	w := bf16Filled(t, b, k, k, func(int) float32 { return 1 })
	x, err := b.FromHost(n, k, make([]float32, n*k))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ProfileSpans(true); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		y, err := b.MatMul(x, w)
		if err != nil {
			t.Fatal(err)
		}
		b.Free(y)
	}
	if err := b.ProfileMark("matmuls"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	if err := b.ProfileMark("pause"); err != nil {
		t.Fatal(err)
	}
	spans, err := b.OpProfile()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ProfileOps(false); err != nil {
		t.Fatal(err)
	}
	b.Free(x)
	b.Free(w)
	if len(spans) != 2 || spans[0].Label != "matmuls" || spans[1].Label != "pause" {
		t.Fatalf("spans %+v, want matmuls and pause", spans)
	}
	for _, s := range spans {
		if len(s.Ops) != 0 || s.Seconds != 0 {
			t.Errorf("span %q: ops %+v (%.6fs), want none timed", s.Label, s.Ops, s.Seconds)
		}
	}
	// four 2048^3 GEMMs are 69 GFLOP: well above a microsecond, well below the pause on any GPU here
	if d := spans[0].Device; !(d > 1e-5) || d > 0.025 {
		t.Errorf("span matmuls: device time %.6fs, want between 10 us and 25 ms", d)
	}
	if d := spans[1].Device; d < 0.025 || d > 5 {
		t.Errorf("span pause: device time %.6fs, want about 0.03 s", d)
	}
}

// bf16Filled uploads a rows x cols bfloat16 weight whose value i is value(i).
func bf16Filled(t *testing.T, b ops.Backend, rows, cols int, value func(i int) float32) ops.Tensor {
	t.Helper()
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = value(i)
	}
	raw := make([]byte, 2*len(v))
	bf16.Encode(raw, v)
	w, err := b.Upload(ops.WeightBF16, rows, cols, raw)
	if err != nil {
		t.Fatal(err)
	}
	return w
}
