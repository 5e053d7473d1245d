package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestPrintOpProfile: the spans of layers of one kind are summed per op, largest first, with their share
// of the kind's op time, and the kind's device time (or, where the spans carry none, wall time) against
// it; the readout span is compared with the time after the last layer; past opProfileTop ops the rest are
// one "other" row.
func TestPrintOpProfile(t *testing.T) {
	span := func(label string, ts ...ops.OpTime) ops.OpSpan {
		s := ops.OpSpan{Label: label, Ops: ts}
		for _, o := range ts {
			s.Seconds += o.Seconds
		}
		return s
	}
	many := make([]ops.OpTime, 18) // 18 ops of 18, 17, ... 1 ms
	for i := range many {
		many[i] = ops.OpTime{Op: fmt.Sprintf("Op%02d", i), Calls: 1, Seconds: float64(18-i) / 1e3}
	}
	many[16].IdleBefore, many[17].IdleBefore = 0.002, 0.007 // folded under other, named by their idle time
	for _, c := range []struct {
		name    string
		kinds   []string
		wall    []float64
		outside float64
		spans   []ops.OpSpan
		rate    *expertRate
		want    []string // lines (or parts of lines, trimmed), in this order
		notWant []string
	}{
		{
			name:    "two kinds and the readout",
			kinds:   []string{"kda+dense", "kda+moe", "kda+moe"},
			wall:    []float64{0.1, 0.5, 0.7},
			outside: 0.05,
			spans: []ops.OpSpan{
				span("0", ops.OpTime{Op: "MatMul 64x32", Calls: 3, Seconds: 0.06}, ops.OpTime{Op: "KDA", Calls: 1, Seconds: 0.02}),
				span("1", ops.OpTime{Op: "ExpertsAccumulate grouped", Calls: 1, Seconds: 0.3, IdleBefore: 0.004, Host: 0.02, HostGap: 0.003}, ops.OpTime{Op: "MatMul 64x32", Calls: 2, Seconds: 0.1}),
				span("2", ops.OpTime{Op: "ExpertsAccumulate grouped", Calls: 1, Seconds: 0.3, IdleBefore: 0.0015}, ops.OpTime{Op: "Route", Calls: 1, Seconds: 0.2}),
				span("readout", ops.OpTime{Op: "OutputStats", Calls: 1, Seconds: 0.04}),
			},
			want: []string{
				"op profile (the median run: run 2 of 3)",
				"kda+dense: 1 layer, wall 0.1000s, ops 0.0800s (a layer: wall 0.1000s, ops 0.0800s); wall - ops 0.0200s (20% of wall: compute stream idle)",
				"MatMul 64x32     3       60.000   75.0",
				"KDA              1       20.000   25.0",
				"kda+moe: 2 layers, wall 1.2000s, ops 0.9000s (a layer: wall 0.6000s, ops 0.4500s); wall - ops 0.3000s (25% of wall: compute stream idle)",
				"op                           calls    device ms      %  idle before    host ms  host gap before",
				"ExpertsAccumulate grouped        2      600.000   66.7        5.500     20.000          3.000",
				"Route                            1      200.000   22.2",
				"MatMul 64x32                     2      100.000   11.1",
				"readout (after the last layer): wall 0.0500s, ops 0.0400s; wall - ops 0.0100s (20% of wall: compute stream idle)",
				"OutputStats        1       40.000  100.0",
			},
			notWant: []string{"other", "no ops timed"},
		},
		{
			// the host ran ahead and waited for the device in layer 1: its wall time is no measure of the
			// device's idle time, the device timeline is
			name:    "idle time from the device timeline, not the host's wall",
			kinds:   []string{"kda+moe", "kda+moe"},
			wall:    []float64{0.1, 2.0},
			outside: 0.3,
			spans: func() []ops.OpSpan {
				a := span("0", ops.OpTime{Op: "KDA", Calls: 1, Seconds: 0.45})
				b := span("1", ops.OpTime{Op: "KDA", Calls: 1, Seconds: 0.45})
				r := span("readout", ops.OpTime{Op: "OutputStats", Calls: 1, Seconds: 0.04})
				a.Device, b.Device, r.Device = 0.5, 0.5, 0.05
				return []ops.OpSpan{a, b, r}
			}(),
			want: []string{
				"kda+moe: 2 layers, device 1.0000s, ops 0.9000s (a layer: device 0.5000s, ops 0.4500s); device - ops 0.1000s (10% of the device's time: compute stream idle); host wall 2.1000s",
				"readout (after the last layer): device 0.0500s, ops 0.0400s; device - ops 0.0100s (20% of the device's time: compute stream idle); host wall 0.3000s",
			},
			notWant: []string{"wall - ops"},
		},
		{
			name:  "the routed experts rated, their wait for uploads left out",
			kinds: []string{"kda+dense", "kda+moe", "kda+moe"},
			wall:  []float64{0.1, 0.5, 0.5},
			spans: []ops.OpSpan{
				span("0", ops.OpTime{Op: "MatMul 64x32", Calls: 3, Seconds: 0.06}),
				span("1", ops.OpTime{Op: "ExpertsAccumulate cuBLASLt", Calls: 2, Seconds: 0.3}, ops.OpTime{Op: "ExpertsAccumulate waiting for uploads", Calls: 2, Seconds: 0.05}),
				span("2", ops.OpTime{Op: "ExpertsAccumulate cuBLASLt", Calls: 2, Seconds: 0.3}, ops.OpTime{Op: "ExpertsAccumulate waiting for uploads", Calls: 2, Seconds: 0.05}),
			},
			rate: &expertRate{flopsPerLayer: 1.5e14, boundFlops: 1e15},
			want: []string{
				"kda+dense: 1 layer",
				"kda+moe: 2 layers",
				"ExpertsAccumulate cuBLASLt 4 600.000",
				"routed experts (ExpertsAccumulate, 2 calls a layer): 300.000 ms a layer, 500.0 TFLOP/s, 2.00x their share of the bound (150.0 TFLOP a layer at 1000.0 TFLOP/s)",
			},
		},
		{
			// the most allocated across the kind's layers is the larger call's of two spans; an op's own is
			// its largest call's, named largest first, ties by name
			name:  "device memory",
			kinds: []string{"kda+moe", "kda+moe"},
			wall:  []float64{0.5, 0.5},
			spans: []ops.OpSpan{
				span("0", ops.OpTime{Op: "KDA", Calls: 1, Seconds: 0.1, MemHigh: 30e9, MemOwn: 2e9},
					ops.OpTime{Op: "SiTUFFN 6144x7168", Calls: 1, Seconds: 0.1, MemHigh: 31e9, MemOwn: 3e9}),
				span("1", ops.OpTime{Op: "KDA", Calls: 1, Seconds: 0.1, MemHigh: 29e9, MemOwn: 4e9},
					ops.OpTime{Op: "SiTUFFN 6144x7168", Calls: 1, Seconds: 0.1, MemHigh: 33e9, MemOwn: 1e9},
					ops.OpTime{Op: "Add", Calls: 1, Seconds: 0.01, MemHigh: 28e9, MemOwn: 1e9},
					ops.OpTime{Op: "Free", Calls: 1, Seconds: 0.001, MemHigh: 27e9}),
			},
			want: []string{
				"device memory in these ops: at most 33.0 GB allocated, in SiTUFFN 6144x7168 (3.0 GB of it its own at most); " +
					"the most an op's call took of its own: KDA 4.0 GB, SiTUFFN 6144x7168 3.0 GB, Add 1.0 GB",
			},
			notWant: []string{"Free 0"},
		},
		{
			name:  "top 15 and other",
			kinds: []string{"mla+moe"},
			wall:  []float64{0.2},
			spans: []ops.OpSpan{span("0", many...)},
			want: []string{
				"mla+moe: 1 layer, wall 0.2000s, ops 0.1710s",
				"Op00                1       18.000   10.5",
				"Op14                1        4.000    2.3",
				"other (3 ops)       3        6.000    3.5        9.000", // 3 + 2 + 1 ms, idle 7 + 2
				"idle before ops under other: Op17 7.000 ms (1 calls; host gap before 0.000 ms), Op16 2.000 ms (1 calls; host gap before 0.000 ms)",
			},
			notWant: []string{"Op15"},
		},
		{
			name:  "a kind without spans, and ops after the last mark",
			kinds: []string{"kda+dense"},
			wall:  []float64{0.3},
			spans: []ops.OpSpan{span("", ops.OpTime{Op: "Free", Calls: 4, Seconds: 0.001})},
			want: []string{
				"kda+dense: 1 layer, wall 0.3000s, ops 0.0000s",
				"no ops timed",
				"(after the last mark): ops 0.0010s",
				"Free       4        1.000  100.0",
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out strings.Builder
			if err := printOpProfile(&out, "the median run: run 2 of 3", c.kinds, c.wall, c.outside, c.spans, c.rate); err != nil {
				t.Fatal(err)
			}
			got := out.String()
			rest := squeeze(got) // the columns' widths are not the point here
			for _, want := range c.want {
				want = squeeze(want)
				i := strings.Index(rest, want)
				if i < 0 {
					t.Fatalf("output lacks %q (in this order):\n%s", want, got)
				}
				rest = rest[i+len(want):]
			}
			moe := 0
			for _, k := range slices.Compact(slices.Clone(c.kinds)) {
				if strings.HasSuffix(k, "+moe") {
					moe++
				}
			}
			if n := strings.Count(got, "routed experts"); c.rate != nil && n != moe || c.rate == nil && n != 0 {
				t.Errorf("%d routed-experts lines for %d MoE kinds (rate %v):\n%s", n, moe, c.rate, got)
			}
			for _, bad := range c.notWant {
				if strings.Contains(got, bad) {
					t.Errorf("output has %q:\n%s", bad, got)
				}
			}
		})
	}
}

// squeeze replaces each run of spaces with one space.
func squeeze(s string) string {
	for strings.Contains(s, "  ") {
		s = strings.ReplaceAll(s, "  ", " ")
	}
	return s
}

// fakeProfiler is an ops.OpProfiler that times nothing: every mark gives a span of two made-up ops and
// 4 ms on the device timeline.
type fakeProfiler struct {
	on    bool
	marks []string
	runs  [][]string // the marks of each OpProfile
}

func (f *fakeProfiler) ProfileOps(on bool) error {
	if on {
		f.marks = nil
	}
	f.on = on
	return nil
}

func (f *fakeProfiler) ProfileMark(label string) error {
	if f.on {
		f.marks = append(f.marks, label)
	}
	return nil
}

func (f *fakeProfiler) OpProfile() ([]ops.OpSpan, error) {
	var spans []ops.OpSpan
	for _, m := range f.marks {
		spans = append(spans, ops.OpSpan{Label: m, Seconds: 0.003, Device: 0.004, Ops: []ops.OpTime{
			{Op: "KDA", Calls: 1, Seconds: 0.002}, {Op: "MatMul 8x8", Calls: 2, Seconds: 0.001}}})
	}
	f.runs = append(f.runs, f.marks)
	f.marks = nil
	return spans, nil
}

// TestBenchOpProfile: benchWave marks every layer's end and the readout in each timed run and prints the
// profile per kind; `bench --op-profile` on a backend without the interface says so and benches on.
func TestBenchOpProfile(t *testing.T) {
	dir := tinyModel(t)
	l, err := openEngine(context.Background(), dir, "cpu", "bf16", backendTuning{}, replay.EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fake := &fakeProfiler{}
	var out strings.Builder
	if err := benchWave(context.Background(), &out, l, bound{readBps: 1e9, flops: 1e10}, 96, 48, 2, &benchProfile{p: fake, tables: true}); err != nil {
		t.Fatal(err)
	}
	layers := len(l.engine.Plan.Layers)
	var want []string
	for i := range layers {
		want = append(want, strconv.Itoa(i))
	}
	want = append(want, "readout")
	if len(fake.runs) != 2 || !slices.Equal(fake.runs[0], want) || !slices.Equal(fake.runs[1], want) {
		t.Errorf("marks per run %q, want two runs of %q", fake.runs, want)
	}
	if fake.on {
		t.Error("op timing left on after the runs")
	}
	kinds := layerKinds(l.engine.Plan)
	n := 0
	for _, k := range kinds {
		if k == kinds[0] {
			n++
		}
	}
	first := kinds[0] + ": " + numtext.Count(n, "layer")
	for _, s := range []string{"op profile (the median run: run ", "KDA", "MatMul 8x8", "compute stream idle",
		"readout (after the last layer)", first, "on the device timeline", "every op timed too", "readout              0.0040"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("bench output lacks %q:\n%s", s, out.String())
		}
	}
	// Without --op-profile (tables false) the marks and the device timeline stay, the op tables go.
	out.Reset()
	if err := benchWave(context.Background(), &out, l, bound{readBps: 1e9, flops: 1e10}, 96, 48, 1, &benchProfile{p: fake}); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "on the device timeline") || strings.Contains(got, "op profile (") || strings.Contains(got, "MatMul 8x8") {
		t.Errorf("without the op tables:\n%s", got)
	}
	// A profiler that times spans alone: the timeline says no op was timed.
	out.Reset()
	spans := &spanFake{}
	spans.opsOff = true
	if err := benchWave(context.Background(), &out, l, bound{readBps: 1e9, flops: 1e10}, 96, 48, 1, &benchProfile{p: spans}); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "compute stream; no op timed)") {
		t.Errorf("with spans only, the timeline's header:\n%s", got)
	}

	out.Reset()
	err = runBench(context.Background(), []string{"--model", dir, "--tokens", "48", "--seq-len", "48", "--repeat", "1",
		"--bound-flops", "1e10", "--bound-bandwidth", "1e9", "--op-profile"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "--op-profile: the cpu backend does not time its ops") || strings.Contains(out.String(), "op profile (") {
		t.Errorf("bench --op-profile on the cpu backend:\n%s", out.String())
	}
}

// TestDeviceTimeline: the spans' device times are averaged per layer kind against the kind's bound, the
// readout summed apart; spans without device times print nothing.
func TestDeviceTimeline(t *testing.T) {
	kinds := []string{"kda+dense", "kda+moe", "mla+moe", "kda+moe"}
	bounds := map[string][2]float64{"kda+dense": {0.1, 0.05}, "kda+moe": {0.5, 0.25}, "mla+moe": {0.4, 0.2}}
	spans := []ops.OpSpan{
		{Label: "0", Device: 0.1}, {Label: "1", Device: 0.3}, {Label: "2", Device: 0.3}, {Label: "3", Device: 0.5},
		{Label: readoutLabel, Device: 0.07}, {Label: "", Seconds: 1},
	}
	var b strings.Builder
	per, readout, ok, err := deviceTimeline(&b, kinds, spans, bounds)
	if err != nil || !ok {
		t.Fatalf("deviceTimeline: ok %v, %v", ok, err)
	}
	want := map[string][2]float64{"kda+dense": {0.1, 0.05}, "kda+moe": {0.4, 0.25}, "mla+moe": {0.3, 0.2}}
	for k, v := range want {
		if got := per[k]; math.Abs(got[0]-v[0]) > 1e-12 || got[1] != v[1] {
			t.Errorf("%s: %v, want %v", k, got, v)
		}
	}
	if readout != 0.07 {
		t.Errorf("readout %g, want 0.07", readout)
	}
	for _, line := range []string{"kda+moe        2     0.4000     0.2500    1.60", "mla+moe        1     0.3000     0.2000    1.50"} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("output lacks %q:\n%s", line, b.String())
		}
	}
	// A request run as two waves: two spans per layer. A layer's time is their sum, against the bound of
	// the whole request (the mean of one wave's span made a two-read request look faster than its bound).
	b.Reset()
	two := append(append([]ops.OpSpan{}, spans[:4]...), spans[:4]...)
	per, _, _, err = deviceTimeline(&b, kinds, two, bounds)
	if err != nil {
		t.Fatal(err)
	}
	if got := per["kda+moe"][0]; math.Abs(got-0.8) > 1e-12 {
		t.Errorf("two waves: kda+moe %g s a layer, want 0.8 (the sum of its waves)", got)
	}
	if !strings.Contains(b.String(), "kda+moe        4     0.8000     0.2500    3.20") {
		t.Errorf("two waves: output\n%s", b.String())
	}
	b.Reset()
	if _, _, ok, err := deviceTimeline(&b, kinds, []ops.OpSpan{{Label: "0", Seconds: 1}}, bounds); ok || err != nil || b.Len() != 0 {
		t.Errorf("no device times: ok %v, err %v, printed %q; want nothing", ok, err, b.String())
	}
}

// spanFake is a fakeProfiler that also offers span timing alone (ops.SpanProfiler), recording which mode
// each start asked for; with opsOff its spans in that mode carry no ops, as a real one's.
type spanFake struct {
	fakeProfiler
	modes  []string
	opsOff bool
	spans  bool // the mode on
}

func (f *spanFake) OpProfile() ([]ops.OpSpan, error) {
	got, err := f.fakeProfiler.OpProfile()
	if f.opsOff && f.spans {
		for i := range got {
			got[i].Ops, got[i].Seconds = nil, 0
		}
	}
	return got, err
}

func (f *spanFake) ProfileOps(on bool) error {
	if on {
		f.modes = append(f.modes, "ops")
	}
	f.spans = false
	return f.fakeProfiler.ProfileOps(on)
}

func (f *spanFake) ProfileSpans(on bool) error {
	if on {
		f.modes = append(f.modes, "spans")
	}
	f.spans = on
	return f.fakeProfiler.ProfileOps(on)
}

// TestBenchProfileMode: the bench times each op only for the op tables (--op-profile); for the device
// timeline alone it asks a backend that offers it for the spans only, so the timeline carries no op
// timing, and a backend without ops.SpanProfiler times its ops as before.
func TestBenchProfileMode(t *testing.T) {
	for _, c := range []struct {
		tables bool
		want   string
	}{{false, "spans"}, {true, "ops"}} {
		f := &spanFake{}
		bp := &benchProfile{p: f, tables: c.tables}
		if err := bp.start(); err != nil {
			t.Fatal(err)
		}
		bp.layerDone(0)
		if _, err := bp.finish(); err != nil {
			t.Fatal(err)
		}
		if len(f.modes) != 1 || f.modes[0] != c.want || f.on {
			t.Errorf("tables %v: modes %v (on after finish: %v), want [%s]", c.tables, f.modes, f.on, c.want)
		}
	}
	plain := &fakeProfiler{}
	bp := &benchProfile{p: plain}
	if err := bp.start(); err != nil || !plain.on {
		t.Errorf("a profiler without span timing: start gave %v, timing on %v", err, plain.on)
	}
}
