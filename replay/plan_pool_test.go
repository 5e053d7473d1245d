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

// TestPlanPooled: where a layer's experts and the wave's state fit the device beside a slice, the plan
// pools the MoE layers' expert calls over every slice (expert-major, stash on the device, experts held
// and fetched ahead), stays within its device peak and gives the unsliced bits; --no-expert-pooling keeps
// a call a slice. A budget that puts the state in host memory pools them there too, their last phases
// folded (TestFoldMajor).
func TestPlanPooled(t *testing.T) {
	lens := []int{300, 41, 700, 5, 1000}
	total := 0
	for _, n := range lens {
		total += n
	}
	seqs := randomSequences(9, 3328, lens...)
	opts := Options{TopK: 3, Lens: []int{4}, Router: true}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), Request{Sequences: seqs, Options: opts})
	probe := openPreset(t, "tiny", 1, cpu.New(cpu.Options{}), EngineOptions{})
	act, state, _ := probe.tokenBytes()
	// a slice of 300 and a quarter of the wave's state
	hostState := quarterStateBudget(probe, act+state, total)
	calls := map[bool]int{}
	for _, c := range []struct {
		name           string
		noPool, pooled bool
		budget         int64
	}{
		{"pooled", false, true, 0},
		{"no pooling", true, false, 0},
		{"state in host memory, pooled", false, true, hostState},
		{"state in host memory, no pooling", true, false, hostState},
	} {
		t.Run(c.name, func(t *testing.T) {
			cb := newCounting(ops.BF16)
			cb.scratch = probe.Model.ExpertScratchBytes
			e := openPreset(t, "tiny", 1, cb, EngineOptions{SliceTokens: 300, ExpertChunk: 3, NoExpertPooling: c.noPool,
				DeviceMemory: c.budget, PrefetchExperts: -1})
			cb.reset()
			got, _, err := e.Run(context.Background(), []Request{{Sequences: seqs, Options: opts}})
			if err != nil {
				t.Fatal(err)
			}
			p := e.plan
			host := c.budget != 0
			if p.Waves != 1 || p.Slices < 2 || p.Pooled != c.pooled || p.ExpertMajor != c.pooled || p.StashOnDevice != c.pooled ||
				strings.Contains(p.String(), "MoE layers pooled") != c.pooled || p.HostState != host ||
				p.FoldMajor != (c.pooled && host) || strings.Contains(p.String(), "running sums cross once a layer") != p.FoldMajor {
				t.Fatalf("plan %s: want one read in several slices, pooled %v, the state in host memory %v, folded %v", p, c.pooled, host, c.pooled && host)
			}
			weights := probe.weightPeak(true)
			if p.FoldMajor {
				weights += probe.tailBytes()
			}
			if p.Pooled && p.WeightBytes != weights {
				t.Errorf("pooled plan holds %d bytes of weights, want every expert of a layer (%d)", p.WeightBytes, weights)
			}
			most := slices.Max(cb.expertRows)
			if pooled := most > p.SliceTokens; pooled != c.pooled {
				t.Errorf("expert calls of at most %d rows with slices of %d: pooled %v, want %v (%s)", most, p.SliceTokens, pooled, c.pooled, p)
			}
			if limit := p.DevicePeak - p.WeightBytes; cb.peak > limit {
				t.Errorf("device peak of activations and carries %d bytes, over the plan's %d (%s)", cb.peak, limit, p)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: results differ from the unsliced wave (%s)", c.name, p)
			}
			if !host {
				calls[c.pooled] = len(cb.expertRows)
			}
			t.Logf("%s; %d expert calls; counted peak %.2f MB of %.2f planned", p, len(cb.expertRows), float64(cb.peak)/1e6, float64(p.DevicePeak-p.WeightBytes)/1e6)
		})
	}
	if calls[true] >= calls[false] {
		t.Errorf("pooled: %d expert calls, sliced %d: pooling should take fewer", calls[true], calls[false])
	}
}

// TestPlanPooledHostState: over device budgets from one that keeps the wave's
// state on the device down to the least that plans it in one read, a pooled plan keeps the state in host
// memory only where the sliced plan (--no-expert-pooling) does too, in as many reads, with slices at least
// 1/hostPoolFloor of the sliced plan's, its last phases folded; both outcomes occur where the state lives
// in host memory (pooled, and sliced because the pooled plan's slices would be too small beside the
// stash).
func TestPlanPooledHostState(t *testing.T) {
	lens := []int{300, 41, 700, 5, 1000}
	probe := openPreset(t, "tiny", 1, cpu.New(cpu.Options{}), EngineOptions{})
	act, state, _ := probe.tokenBytes()
	total := 2046
	// twice what a sliced plan of 300-token slices holds with the state on the device: room for the
	// pooled plan's stash too
	top := 2 * (probe.weightPeak(true) + probe.carryBytes(1000, true) + 300*act + int64(total)*state)
	seen := map[string]int{}
	for budget := top; budget > top/8; budget -= top / 128 {
		opts := EngineOptions{SliceTokens: 300, ExpertChunk: 3, DeviceMemory: budget, PrefetchExperts: -1}
		p, err := openPreset(t, "tiny", 1, newCounting(ops.BF16), opts).PlanWave(lens)
		if err != nil {
			break // below what plans the wave at all
		}
		opts.NoExpertPooling = true
		s, err := openPreset(t, "tiny", 1, newCounting(ops.BF16), opts).PlanWave(lens)
		if err != nil {
			t.Fatalf("budget %d: pooled %s, but the sliced plan fails: %v", budget, p, err)
		}
		if p.Pooled {
			switch {
			case p.HostState && !s.HostState:
				t.Errorf("budget %d: pooled %s moves the state the sliced plan keeps on the device (%s)", budget, p, s)
			case p.Waves != s.Waves:
				t.Errorf("budget %d: pooled %s in %d reads, sliced %d", budget, p, p.Waves, s.Waves)
			case p.HostState && p.SliceTokens < s.SliceTokens/hostPoolFloor:
				t.Errorf("budget %d: pooled %s: slices of %d against the sliced plan's %d", budget, p, p.SliceTokens, s.SliceTokens)
			case p.FoldMajor != p.HostState:
				t.Errorf("budget %d: pooled %s, the state in host memory %v: folded %v", budget, p, p.HostState, p.FoldMajor)
			}
		}
		seen[fmt.Sprintf("pooled %v, state in host memory %v", p.Pooled, p.HostState)]++
	}
	t.Logf("plans over the budgets: %v", seen)
	for _, want := range []string{"pooled true, state in host memory false", "pooled true, state in host memory true", "pooled false, state in host memory true"} {
		if seen[want] == 0 {
			t.Errorf("no budget gave a plan %s (%v)", want, seen)
		}
	}
}

// limitedCPU is the CPU backend with an element limit, as the CUDA backend has (int32 indices).
type limitedCPU struct {
	*cpu.Backend
	max int64
}

func (l limitedCPU) MaxElements() int64 { return l.max }

// TestPooledChunk: a pooled layer's chunk, when none is given, is the largest of n, n/2, ... whose even
// share of the wave's (row, expert) pairs stays within pooledCallPairs and what the backend indexes at
// once; a given chunk is kept.
func TestPooledChunk(t *testing.T) {
	probe := openTiny(t, ops.BF16, EngineOptions{})
	d, n := probe.Model.Dims, probe.Plan.Config.NumExperts
	if n < 8 {
		t.Fatalf("the tiny model has %d experts: too few to halve", n)
	}
	rowsAt := int64(max(d.Latent, d.ExpertFFN))
	callTokens := pooledCallPairs / d.TopK // a wave whose pairs are one call's
	for _, c := range []struct {
		limitRows           int64 // 0: no element limit
		tokens, given, want int
	}{
		{0, 100, 0, n},                           // room for every pair at once
		{0, callTokens, 0, n},                    // exactly one call's pairs
		{0, 2 * callTokens, 0, n / 2},            // two calls' worth
		{0, 3 * callTokens, 0, n / 4},            // past two: a quarter
		{0, 1 << 30, 0, 1},                       // never below one expert
		{int64(100 * d.TopK / 2), 100, 0, n / 2}, // the element limit: half the pairs
		{int64(100*d.TopK/2 - 1), 100, 0, n / 4}, // just under half: a quarter
		{int64(100 * d.TopK / 4), 100, 3, 3},     // given
		{1 << 40, 4 * callTokens, 0, n / 4},      // a loose limit: the call's bound
	} {
		t.Run(fmt.Sprintf("limit %d rows, %d tokens, given %d", c.limitRows, c.tokens, c.given), func(t *testing.T) {
			var b ops.Backend = cpu.New(cpu.Options{})
			if c.limitRows > 0 {
				b = limitedCPU{cpu.New(cpu.Options{}), c.limitRows * rowsAt}
			}
			e := openPreset(t, "tiny", 1, b, EngineOptions{ExpertChunk: c.given})
			if got := e.pooledChunk(c.tokens); got != c.want {
				t.Errorf("chunk %d, want %d (%d experts, top-%d)", got, c.want, n, d.TopK)
			}
		})
	}
}

// pooledHostBudget is a device budget, from twice around down to half of it in steps of around/256,
// under which engine(budget) plans a wave of lens pooled with the state in host memory (plan_pool.go):
// room for the wave's expert inputs on the device and not for its state. ok is false where no budget
// does: the window is narrow where a token's expert inputs take about what its state does (the tiny
// preset: about 6% of the budget, near what slicedDevice gives). The plans are made, not run.
func pooledHostBudget(lens []int, engine func(budget int64) *Engine, around int64) (budget int64, ok bool) {
	for budget := 2 * around; budget >= around/2; budget -= around / 256 {
		p, err := engine(budget).PlanWave(lens)
		if err == nil && p.Pooled && p.HostState && p.Waves == 1 {
			return budget, true
		}
	}
	return 0, false
}
