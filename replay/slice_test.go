package replay

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// sliceSeqs are a wave whose sequences slice boundaries cut at many positions: shorter than the short
// convolution's kernel, across a 64-row chunk, and one long sequence.
var sliceSeqLens = []int{1, 3, 17, 64, 65, 150}

// TestSliceInvariance: a wave run with its layers in slices of any size, with the state on the device or
// in host memory, gives every table bit for bit as the unsliced wave (tiny and small presets, both
// precisions). Slice sizes 1 and sizes that cut sequences at every residue of the convolution kernel (4)
// and of 64.
func TestSliceInvariance(t *testing.T) {
	opts := Options{TopK: 5, Lens: []int{1, 3}, Router: true, AttnRes: true}
	cases := []struct {
		preset string
		sizes  []int
	}{
		{"tiny", []int{1, 2, 3, 5, 7, 63, 64, 65, 129, 200}},
		{"small", []int{13, 100}},
	}
	if testing.Short() {
		cases[0].sizes = []int{1, 7, 65}
		cases = cases[:1]
	}
	for _, c := range cases {
		for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
			t.Run(fmt.Sprintf("%s/%s", c.preset, prec), func(t *testing.T) {
				seqs := randomSequences(5, 3328, sliceSeqLens...)
				o := opts
				o.Hidden = []int{0, 2}
				whole := openPreset(t, c.preset, 1, cpu.New(cpu.Options{Precision: prec}), EngineOptions{})
				want := runOne(t, whole, Request{Sequences: seqs, Options: o})
				for i, n := range c.sizes {
					for _, v := range []struct{ host, pooledHost bool }{{false, false}, {true, false}, {true, true}} {
						host := v.host
						// with the state on the device, every other size keeps the MoE layers slice by slice
						// (the rest pool their expert calls: plan_pool.go); with it in host memory a budget
						// with room for the pooled stash beside the slices pools them, their last phases
						// folded (pooledHostBudget), and the slices' budget alone keeps them slice by slice
						eo := EngineOptions{SliceTokens: n, NoExpertPooling: i%2 == 1 || (host && !v.pooledHost)}
						if v.pooledHost {
							// the small preset's wave has no such budget: its expert inputs take more than its
							// state, so where they fit the device beside a slice so does the state
							if c.preset != "tiny" || i%2 == 1 {
								continue
							}
							budget, ok := pooledHostBudget(sliceSeqLens, func(budget int64) *Engine {
								o := eo
								o.DeviceMemory = budget
								return openPreset(t, c.preset, 1, cpu.New(cpu.Options{Precision: prec}), o)
							}, slicedDevice(t, c.preset, n))
							if !ok {
								t.Fatalf("slices of %d: no device budget plans the wave pooled with the state in host memory", n)
							}
							eo.DeviceMemory = budget
						} else if host { // a device budget too small for the wave's state: it goes to host memory
							eo.DeviceMemory = slicedDevice(t, c.preset, n)
						}
						var plan string
						eo.Log = func(s string) { plan = s }
						e := openPreset(t, c.preset, 1, cpu.New(cpu.Options{Precision: prec}), eo)
						got := runOne(t, e, Request{Sequences: seqs, Options: o})
						if host != strings.Contains(plan, "in host memory") {
							t.Fatalf("slices of %d, host state %v: plan %q", n, host, plan)
						}
						if pooled := (!host || v.pooledHost) && !eo.NoExpertPooling && e.plan.Slices > 1; pooled != e.plan.Pooled || e.plan.FoldMajor != (pooled && host) {
							t.Fatalf("slices of %d, host state %v: plan %q: want MoE layers pooled %v", n, host, plan, pooled)
						}
						if !reflect.DeepEqual(got, want) {
							t.Errorf("slices of %d (host state %v): results differ from the unsliced wave; plan %s", n, host, plan)
						}
					}
				}
			})
		}
	}
}

// slicedDevice is a device budget that holds the weights and a slice of n tokens but not the state of the
// whole test wave.
func slicedDevice(t *testing.T, preset string, n int) int64 {
	t.Helper()
	return slicedDeviceFor(t, openPreset(t, preset, 1, cpu.New(cpu.Options{}), EngineOptions{DeviceMemory: 1 << 40}), n)
}

// slicedDeviceFor is slicedDevice for engine e's model and backend.
func slicedDeviceFor(t *testing.T, e *Engine, n int) int64 {
	t.Helper()
	total := 0
	for _, l := range sliceSeqLens {
		total += l
	}
	act, state, _ := e.tokenBytes()
	if _, perRow, ok := e.prefixBytes(150); ok {
		act += perRow
	}
	if n >= total {
		t.Fatalf("slices of %d cover the whole test wave of %d tokens: no state to put off the device", n, total)
	}
	var accs int64 // expert-major: every slice's expert accumulator
	if e.forceExpertMajor {
		accs = 4 * int64(e.Model.Dims.Latent) * int64(total)
	}
	// a slice's activations and state, and half the state of the rest of the wave
	return e.weightPeak(true) + e.carryBytes(150, true) + accs + int64(n)*(act+state) + int64(total-n)*state/2
}

// quarterStateBudget is a device budget for the tiny model (probe's plan) and a wave of total tokens in
// sequences of up to 1,000: a slice of 300 rows of perRow bytes each beside the weights and carries, and a
// quarter of the wave's state, so that the rest of the state lives in host memory.
func quarterStateBudget(probe *Engine, perRow int64, total int) int64 {
	_, state, _ := probe.tokenBytes()
	return probe.weightPeak(true) + probe.carryBytes(1000, true) + 300*perRow + int64(total)*state/4
}

// counting is a backend that counts the bytes of the activations and carries it holds, to hold the
// engine to its plan. Weights (Upload, UploadExpert) are left out: the plan counts them in checkpoint
// bytes.
type counting struct {
	*cpu.Backend
	liveBytes
	// expertRows has the rows of every ExpertsAccumulate call; with scratch set, each call also counts
	// scratch(rows, pairs) bytes while it runs, pairs being its (row, expert) pairs with the expert given.
	// expertPairs has the (row, expert) pairs of every call, with the expert given.
	expertRows, expertPairs []int
	scratch                 func(rows, pairs int) int64
}

func (c *counting) ExpertsAccumulate(acc, z ops.Tensor, r ops.Routing, experts []ops.Expert, beta, linBeta float32) error {
	given := map[int32]bool{}
	for _, e := range experts {
		given[int32(e.ID())] = true
	}
	pairs := 0
	for _, id := range r.IDs {
		if given[id] {
			pairs++
		}
	}
	c.mu.Lock()
	c.expertRows = append(c.expertRows, z.Rows())
	c.expertPairs = append(c.expertPairs, pairs)
	c.mu.Unlock()
	if c.scratch != nil {
		key := new(int)
		c.add(key, c.scratch(z.Rows(), pairs))
		defer c.drop(key)
	}
	return c.Backend.ExpertsAccumulate(acc, z, r, experts, beta, linBeta)
}

func newCounting(p ops.Precision) *counting {
	return &counting{Backend: cpu.New(cpu.Options{Precision: p})}
}

func (c *counting) t(x ops.Tensor, err error) (ops.Tensor, error) {
	if err == nil && x != nil {
		c.add(x, 4*int64(x.Rows())*int64(x.Cols()))
	}
	return x, err
}

func (c *counting) carry(x ops.Tensor, k ops.Carry, err error) (ops.Tensor, ops.Carry, error) {
	c.t(x, err)
	if err == nil && k != nil {
		c.add(k, k.CarryBytes())
	}
	return x, k, err
}

func (c *counting) Free(x any) {
	c.drop(x)
	c.Backend.Free(x)
}

func (c *counting) FromHost(r, k int, d []float32) (ops.Tensor, error) {
	return c.t(c.Backend.FromHost(r, k, d))
}
func (c *counting) FromHostBF16(r, k int, d []uint16) (ops.Tensor, error) {
	return c.t(c.Backend.FromHostBF16(r, k, d))
}
func (c *counting) Gather(w ops.Tensor, ids []int32) (ops.Tensor, error) {
	return c.t(c.Backend.Gather(w, ids))
}
func (c *counting) MatMul(x, w ops.Tensor) (ops.Tensor, error) { return c.t(c.Backend.MatMul(x, w)) }
func (c *counting) JoinRows(parts []ops.Tensor) (ops.Tensor, error) {
	return c.t(c.Backend.JoinRows(parts))
}
func (c *counting) Slice(x ops.Tensor, a, b int) (ops.Tensor, error) {
	return c.t(c.Backend.Slice(x, a, b))
}
func (c *counting) Add(a, b ops.Tensor) (ops.Tensor, error) { return c.t(c.Backend.Add(a, b)) }
func (c *counting) RMSNorm(x, w ops.Tensor, eps float32) (ops.Tensor, error) {
	return c.t(c.Backend.RMSNorm(x, w, eps))
}
func (c *counting) GatedRMSNorm(x, w, g ops.Tensor, eps float32) (ops.Tensor, error) {
	return c.t(c.Backend.GatedRMSNorm(x, w, g, eps))
}
func (c *counting) MulSigmoid(x, g ops.Tensor) (ops.Tensor, error) {
	return c.t(c.Backend.MulSigmoid(x, g))
}
func (c *counting) AttnResMix(vs []ops.Tensor, wg ops.Tensor) (ops.Tensor, []float32, error) {
	out, w, err := c.Backend.AttnResMix(vs, wg)
	c.t(out, err)
	return out, w, err
}
func (c *counting) ShortConvSiLU(x, w ops.Tensor, l ops.Layout) (ops.Tensor, error) {
	return c.t(c.Backend.ShortConvSiLU(x, w, l))
}
func (c *counting) KDA(q, k, v, g, b, a, dt ops.Tensor, h int, lo float32, l ops.Layout) (ops.Tensor, error) {
	return c.t(c.Backend.KDA(q, k, v, g, b, a, dt, h, lo, l))
}
func (c *counting) MLA(q, kv, ks ops.Tensor, h, n, s, v int, l ops.Layout) (ops.Tensor, error) {
	return c.t(c.Backend.MLA(q, kv, ks, h, n, s, v, l))
}
func (c *counting) SiTUGLU(g, u ops.Tensor, b, lb float32) (ops.Tensor, error) {
	return c.t(c.Backend.SiTUGLU(g, u, b, lb))
}
func (c *counting) Zeros(r, k int) (ops.Tensor, error)     { return c.t(c.Backend.Zeros(r, k)) }
func (c *counting) Round(x ops.Tensor) (ops.Tensor, error) { return c.t(c.Backend.Round(x)) }
func (c *counting) ShortConvSiLUSlice(x, w ops.Tensor, l ops.SliceLayout, in ops.Carry) (ops.Tensor, ops.Carry, error) {
	return c.carry(c.Backend.ShortConvSiLUSlice(x, w, l, in))
}
func (c *counting) KDASlice(q, k, v, g, b, a, dt ops.Tensor, h int, lo float32, l ops.SliceLayout, in ops.Carry) (ops.Tensor, ops.Carry, error) {
	return c.carry(c.Backend.KDASlice(q, k, v, g, b, a, dt, h, lo, l, in))
}
func (c *counting) MLASlice(q, kv, ks, lat, kvb ops.Tensor, h, n, s, v int, l ops.SliceLayout, in ops.Carry) (ops.Tensor, ops.Carry, error) {
	return c.carry(c.Backend.MLASlice(q, kv, ks, lat, kvb, h, n, s, v, l, in))
}

// TestPlanBoundsDevice: on a device budget a fraction of what the wave's state needs, the engine plans
// slices with the state in host memory, runs the wave in one read, and the activations and carries it
// holds never pass the plan's device peak (less the weights, which the counting backend leaves out).
func TestPlanBoundsDevice(t *testing.T) {
	lens := []int{300, 41, 700, 5, 1000}
	c := newCounting(ops.BF16)
	probe := openPreset(t, "tiny", 1, cpu.New(cpu.Options{}), EngineOptions{})
	total := 0
	for _, n := range lens {
		total += n
	}
	_, state, _ := probe.tokenBytes()
	budget := probe.weightPeak(true) + probe.carryBytes(1000, true) + int64(total)*state/4 // a quarter of the state
	var plans []string
	e := openPreset(t, "tiny", 1, c, EngineOptions{DeviceMemory: budget, Log: func(s string) { plans = append(plans, s) }})
	seqs := randomSequences(9, 3328, lens...)
	c.reset() // the globals' setup is not the wave's
	got, st, err := e.Run(context.Background(), []Request{{Sequences: seqs, Options: Options{TopK: 3, Lens: []int{4}}}})
	if err != nil {
		t.Fatal(err)
	}
	p := e.plan
	if p.Waves != 1 || !p.HostState || p.Slices < 4 {
		t.Fatalf("plan %s: want one read, host state and several slices", p)
	}
	if st.Sequences != len(lens) || len(plans) != 1 {
		t.Fatalf("stats %+v, plan lines %q", st, plans)
	}
	if limit := p.DevicePeak - p.WeightBytes; c.peak > limit {
		t.Errorf("device peak of activations and carries %d bytes, over the plan's %d (%s)", c.peak, limit, p)
	}
	t.Logf("%s; counted peak %.2f MB of %.2f planned", p, float64(c.peak)/1e6, float64(p.DevicePeak-p.WeightBytes)/1e6)
	// and the same results as an unsliced run with room to spare
	whole := openTiny(t, ops.BF16, EngineOptions{})
	want := runOne(t, whole, Request{Sequences: seqs, Options: Options{TopK: 3, Lens: []int{4}}})
	if !reflect.DeepEqual(got, want) {
		t.Error("the planned, sliced run differs from the unsliced one")
	}
}

// TestPlanRefuses: budgets that cannot hold a request are refused before any compute, naming the
// budget and its flag.
func TestPlanRefuses(t *testing.T) {
	probe := openPreset(t, "tiny", 1, cpu.New(cpu.Options{}), EngineOptions{})
	w := probe.weightPeak(true) + probe.carryBytes(900, true) // the weights and a 900-token sequence's carries
	cases := []struct {
		name string
		opts EngineOptions
		want string
	}{
		{"device below the weights", EngineOptions{DeviceMemory: probe.weightPeak(true) / 2}, "--device-memory"},
		{"host below one sequence's state", EngineOptions{DeviceMemory: w + 2<<20, HostMemory: 1 << 10}, "--host-memory"},
	}
	seqs := randomSequences(2, 3328, 900)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := openTiny(t, ops.BF16, c.opts)
			_, _, err := e.Run(context.Background(), []Request{{Sequences: seqs}})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one naming %s", err, c.want)
			}
		})
	}
}

// TestPlanCapsSliceTokens: --slice-tokens is the most tokens a slice takes: past what the device budget
// holds beside the slice's state it is capped there, and the plan line says so (it used to be refused,
// or, where the activations alone fitted, planned past the budget by the slice's state).
func TestPlanCapsSliceTokens(t *testing.T) {
	probe := openPreset(t, "tiny", 1, cpu.New(cpu.Options{}), EngineOptions{})
	w := probe.weightPeak(true) + probe.carryBytes(900, true)
	e := openTiny(t, ops.BF16, EngineOptions{DeviceMemory: w + 2<<20, SliceTokens: 1 << 20})
	p, err := e.PlanWave([]int{900, 900})
	if err != nil {
		t.Fatal(err)
	}
	if p.SliceTokens >= 1800 || p.DevicePeak > p.DeviceBudget || !strings.Contains(p.String(), "--slice-tokens 1,048,576 capped at") {
		t.Errorf("plan %s: want slices capped below the wave, within the budget, and said", p)
	}
	seqs := randomSequences(2, 3328, 900)
	if _, _, err := e.Run(context.Background(), []Request{{Sequences: seqs}}); err != nil {
		t.Errorf("the capped plan's run: %v", err)
	}
}

// TestPlanCappedSliceRounded: a capped --slice-tokens is rounded down to a multiple of 1,024 as planned
// slices are, so that device budgets a few kB apart (the free memory a wave finds after the last one)
// plan the same slices: the state buffers in host memory are pinned per size (statebufs.go), and run
// 131 pinned a wave's 7.5 GB of state again for slices of 52,108 tokens after 52,093.
func TestPlanCappedSliceRounded(t *testing.T) {
	probe := openPreset(t, "tiny", 1, cpu.New(cpu.Options{}), EngineOptions{})
	w := probe.weightPeak(true) + probe.carryBytes(900, true)
	lens := make([]int, 40)
	for i := range lens {
		lens[i] = 900
	}
	plan := func(extra int64) WavePlan {
		t.Helper()
		e := openTiny(t, ops.BF16, EngineOptions{DeviceMemory: w + extra, SliceTokens: 1 << 20})
		p, err := e.PlanWave(lens)
		if err != nil {
			t.Fatalf("device budget of %d bytes past the weights: %v", extra, err)
		}
		return p
	}
	var extra int64
	var p WavePlan
	for extra = 2 << 20; ; extra *= 2 {
		if extra > 1<<32 {
			t.Fatal("no device budget capped the slices at more than 1,024 tokens")
		}
		if p = plan(extra); p.SliceTokens > 1024 && strings.Contains(p.String(), "capped at") {
			break
		}
	}
	if p.SliceTokens%1024 != 0 || p.DevicePeak > p.DeviceBudget {
		t.Errorf("plan %s: want slices of a multiple of 1,024 tokens within the budget", p)
	}
	for _, more := range []int64{4 << 10, 8 << 10, 12 << 10} {
		if q := plan(extra + more); q.SliceTokens != p.SliceTokens {
			t.Errorf("a device budget %d bytes larger planned slices of %d tokens, not %d", more, q.SliceTokens, p.SliceTokens)
		}
	}
}

// TestPlanUnslicedWhenExpertsDoNotFit: sliced, every routed expert of a layer stays on the device for its
// slices; on a device too small for that but large enough for chunks of experts, the plan runs layers
// unsliced and says why, and the results are the unsliced ones.
func TestPlanUnslicedWhenExpertsDoNotFit(t *testing.T) {
	seqs := randomSequences(4, 3328, 5, 7)
	probe := openPreset(t, "tiny", 1, cpu.New(cpu.Options{}), EngineOptions{ExpertChunk: 1})
	act, state, _ := probe.tokenBytes()
	chunked := probe.weightPeak(false) + probe.carryBytes(7, false) + 12*(act+state)
	if all := probe.weightPeak(true) + probe.carryBytes(7, true) + minSlice*act; chunked >= all {
		t.Fatalf("test setup: the chunked budget %d does not fall below the sliced one %d", chunked, all)
	}
	var plan string
	e := openTiny(t, ops.BF16, EngineOptions{ExpertChunk: 1, DeviceMemory: chunked, Log: func(s string) { plan = s }})
	got := runOne(t, e, Request{Sequences: seqs, Options: Options{TopK: 3}})
	if !strings.Contains(plan, "layers unsliced: a layer's routed experts") || !strings.Contains(plan, "1 slice") {
		t.Errorf("plan %q: want one slice and the reason", plan)
	}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), Request{Sequences: seqs, Options: Options{TopK: 3}})
	if !reflect.DeepEqual(got, want) {
		t.Error("results differ from an unconstrained run")
	}
}

// TestSliceInvarianceChunkedExperts: sliced, with the routed experts fetched in chunks (each slice
// accumulates chunk by chunk and fetches what a chunk lacks), every table is the unsliced wave's.
func TestSliceInvarianceChunkedExperts(t *testing.T) {
	opts := Options{TopK: 5, Lens: []int{3}, Router: true}
	seqs := randomSequences(6, 3328, sliceSeqLens...)
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), Request{Sequences: seqs, Options: opts})
	for _, c := range []struct{ slice, chunk int }{{7, 1}, {65, 3}, {129, 5}} {
		e := openTiny(t, ops.BF16, EngineOptions{SliceTokens: c.slice, ExpertChunk: c.chunk})
		if got := runOne(t, e, Request{Sequences: seqs, Options: opts}); !reflect.DeepEqual(got, want) {
			t.Errorf("slices of %d, experts in chunks of %d: results differ from the unsliced wave", c.slice, c.chunk)
		}
	}
}

// TestPlanExpertMajor: MoE layers run expert-major (each chunk of experts serving every slice, the expert
// inputs in host memory) under a device budget of a few slices stay within the plan's device peak, with
// the unsliced bits and the plan line saying so.
func TestPlanExpertMajor(t *testing.T) {
	lens := []int{300, 41, 700, 5, 1000}
	total := 0
	for _, n := range lens {
		total += n
	}
	probe := openPreset(t, "tiny", 1, cpu.New(cpu.Options{}), EngineOptions{ExpertChunk: 1})
	act, state, _ := probe.tokenBytes()
	accs := 4 * int64(probe.Model.Dims.Latent) * int64(total)
	// the tiny model's experts are smaller than the accumulators, so its planner would never choose
	// expert-major on its own: the test forces it, and holds it to its plan under a budget of a few slices
	budget := probe.weightPeak(false) + probe.carryBytes(1000, true) + accs + 300*act + int64(total)*state/4
	seqs := randomSequences(9, 3328, lens...)
	opts := Options{TopK: 3, Lens: []int{4}, Router: true}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), Request{Sequences: seqs, Options: opts})
	// the expert inputs in host memory; then on the device, with room for them and slices of 300 given
	stash := 4 * int64(probe.Model.Dims.Latent+probe.Model.Dims.Hidden) * int64(total)
	for _, c := range []struct {
		onDevice bool
		budget   int64
		slice    int
	}{{false, budget, 0}, {true, budget + stash, 300}} {
		cb := newCounting(ops.BF16)
		cb.scratch = probe.Model.ExpertScratchBytes
		e := openPreset(t, "tiny", 1, cb, EngineOptions{ExpertChunk: 1, DeviceMemory: c.budget, SliceTokens: c.slice})
		e.forceExpertMajor = true
		cb.reset()
		got, _, err := e.Run(context.Background(), []Request{{Sequences: seqs, Options: opts}})
		if err != nil {
			t.Fatal(err)
		}
		p := e.plan
		if !p.ExpertMajor || p.Waves != 1 || p.Slices < 2 || !strings.Contains(p.String(), "MoE layers expert-major") || p.StashOnDevice != c.onDevice {
			t.Fatalf("plan %s: want one read in several slices, MoE layers expert-major, the stash on the device %v", p, c.onDevice)
		}
		// the slices pool into expert calls of more rows than a slice (moe_pool.go)
		if most := slices.Max(cb.expertRows); most <= p.SliceTokens {
			t.Errorf("stash on the device %v: expert calls of at most %d rows with slices of %d: no slices pooled (%s)", c.onDevice, most, p.SliceTokens, p)
		}
		if limit := p.DevicePeak - p.WeightBytes; cb.peak > limit {
			t.Errorf("stash on the device %v: device peak of activations and carries %d bytes, over the plan's %d (%s)", c.onDevice, cb.peak, limit, p)
		}
		t.Logf("%s; counted peak %.2f MB of %.2f planned", p, float64(cb.peak)/1e6, float64(p.DevicePeak-p.WeightBytes)/1e6)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("stash on the device %v: the expert-major run differs from the unsliced one", c.onDevice)
		}
	}
}

// TestSliceInvarianceExpertMajor: MoE layers run expert-major give every table of the unsliced wave,
// in both precisions, for several slice sizes and expert chunks, with the state on the device and the
// expert inputs on the device (joined per pool) or in host memory.
func TestSliceInvarianceExpertMajor(t *testing.T) {
	opts := Options{TopK: 5, Lens: []int{1, 3}, Hidden: []int{2}, Router: true, AttnRes: true}
	seqs := randomSequences(7, 3328, sliceSeqLens...)
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		want := runOne(t, openTiny(t, prec, EngineOptions{}), Request{Sequences: seqs, Options: opts})
		for _, c := range []struct{ slice, chunk int }{{1, 3}, {7, 1}, {65, 2}, {129, 5}} {
			for _, onHost := range []bool{false, true} {
				e := openTiny(t, prec, EngineOptions{SliceTokens: c.slice, ExpertChunk: c.chunk})
				e.forceExpertMajor, e.forceHostStash = true, onHost
				if got := runOne(t, e, Request{Sequences: seqs, Options: opts}); !reflect.DeepEqual(got, want) {
					t.Errorf("%s, slices of %d, expert-major in chunks of %d, stash on the host %v: results differ from the unsliced wave", prec, c.slice, c.chunk, onHost)
				}
				if !e.plan.ExpertMajor || e.plan.StashOnDevice == onHost {
					t.Errorf("%s, slices of %d, stash on the host %v: plan %s", prec, c.slice, onHost, e.plan)
				}
			}
		}
	}
}

// TestPlanChoosesExpertChunk: with --expert-chunk 0 on a device too small for a layer's experts beside a
// slice, the plan takes the largest chunk (halving from half the experts) that plans in one read with
// slices of at least sliceFloor tokens or the whole wave (pickChunk), says so, holds the wave within its
// device peak, and gives the unconstrained bits; unsliced and forced expert-major, under budgets that make
// it halve.
func TestPlanChoosesExpertChunk(t *testing.T) {
	lens := []int{5, 7}
	seqs := randomSequences(4, 3328, lens...)
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), Request{Sequences: seqs, Options: Options{TopK: 3}})
	probe := openPreset(t, "tiny", 1, cpu.New(cpu.Options{}), EngineOptions{ExpertChunk: 1})
	act, state, _ := probe.tokenBytes()
	accs := 4 * int64(probe.Model.Dims.Latent) * 12
	for _, c := range []struct {
		major  bool
		budget int64
	}{
		{false, probe.weightPeakChunk(false, 2) + probe.carryBytes(7, false) + 12*(act+state)},
		{true, probe.weightPeakChunk(false, 2) + probe.carryBytes(7, true) + accs + 12*(act+state)},
	} {
		cb := newCounting(ops.BF16)
		var plan string
		e := openPreset(t, "tiny", 1, cb, EngineOptions{DeviceMemory: c.budget, Log: func(s string) { plan = s }})
		e.forceExpertMajor = c.major
		cb.reset()
		got, _, err := e.Run(context.Background(), []Request{{Sequences: seqs, Options: Options{TopK: 3}}})
		if err != nil {
			t.Fatalf("expert-major %v: %v", c.major, err)
		}
		p := e.plan
		if !strings.Contains(plan, "chosen by the plan: --expert-chunk 0") || p.ExpertMajor != c.major || p.Waves != 1 {
			t.Fatalf("expert-major %v: plan %q: want one read, a chunk chosen by the plan", c.major, plan)
		}
		if p.ExpertChunk >= 8 {
			t.Errorf("expert-major %v: chunk %d: the budget should make the plan halve below 8", c.major, p.ExpertChunk)
		}
		for _, bigger := range autoChunks(probe.Plan.Config.NumExperts) {
			if bigger <= p.ExpertChunk {
				break
			}
			q, err := e.planChunked(lens, bigger, 0)
			if err == nil && q.Waves == 1 && (q.Slices == 1 || q.SliceTokens >= min(sliceFloor, q.WaveTokens)) {
				t.Errorf("expert-major %v: chunk %d chosen, but %d plans in one read with slices as large (%s)", c.major, p.ExpertChunk, bigger, q)
			}
		}
		if limit := p.DevicePeak - p.WeightBytes; cb.peak > limit {
			t.Errorf("expert-major %v: device peak of activations and carries %d bytes, over the plan's %d (%s)", c.major, cb.peak, limit, p)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("expert-major %v: results differ from an unconstrained run", c.major)
		}
		t.Logf("%s", p)
	}
}
