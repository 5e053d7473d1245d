package replay

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestPlanWithinBudgets: every plan the planner accepts keeps to its budgets by its own figures, over a
// grid of device and host budgets, --slice-tokens and wave shapes, with the state on the device, split,
// and in several waves: the device peak within the device budget, the state kept in host memory with the
// expert inputs and the reads' own buffers within the host budget, slices that cover the wave and a
// given --slice-tokens never exceeded; a plan of several reads of the weights says why. A planned limit must never be found by running out of memory: a
// --slice-tokens that fit the device by its activations alone once planned past the budget by its state
// (the audit's 160.8 GB of 141 GB), and the state once filled a host budget its read buffers then overran.
func TestPlanWithinBudgets(t *testing.T) {
	e := openTiny(t, ops.BF16, EngineOptions{})
	act, state, hostState := e.tokenBytes()
	base := e.weightPeak(true) + e.carryBytes(4096, true)
	reserve := e.hostReadBuffers()
	shapes := []struct{ seqs, seqLen int }{{1, 100}, {16, 512}, {64, 1024}, {1, 20000}}
	checked, refused := 0, 0
	for _, sh := range shapes {
		lens := make([]int, sh.seqs)
		for i := range lens {
			lens[i] = sh.seqLen
		}
		wave := sh.seqs * sh.seqLen
		for _, dev := range []int64{base + 64*act, base + int64(wave)*act/8, base + int64(wave)*(act+state)/3, base + int64(wave)*(act+state)*2} {
			for _, host := range []int64{1 << 20, reserve + int64(wave)*hostState/4, reserve + int64(wave)*hostState*2} {
				for _, slice := range []int{0, 1, 7, 300, 4097, 100000} {
					e.opts.DeviceMemory, e.opts.HostMemory, e.opts.SliceTokens = dev, host, slice
					name := fmt.Sprintf("%dx%d device %d host %d slice %d", sh.seqs, sh.seqLen, dev, host, slice)
					p, err := e.planWave(lens)
					if err != nil {
						if !errors.Is(err, ErrBudget) {
							t.Errorf("%s: %v, not ErrBudget", name, err)
						}
						refused++
						continue
					}
					checked++
					if p.DevicePeak > p.DeviceBudget {
						t.Errorf("%s: device peak %d over the budget %d: %s", name, p.DevicePeak, p.DeviceBudget, p)
					}
					if p.HostState && p.HostBytes+p.StashBytes+reserve > p.HostBudget {
						t.Errorf("%s: host state %d, expert inputs %d and read buffers %d over the budget %d: %s",
							name, p.HostBytes, p.StashBytes, reserve, p.HostBudget, p)
					}
					if p.SliceTokens <= 0 || p.Slices*p.SliceTokens < p.WaveTokens || p.WaveTokens <= 0 {
						t.Errorf("%s: %d slices of %d do not cover a wave of %d: %s", name, p.Slices, p.SliceTokens, p.WaveTokens, p)
					}
					if p.Waves > 1 && p.wavesWhy == "" {
						t.Errorf("%s: %d reads of the weights, and the plan does not say why: %s", name, p.Waves, p)
					}
					if slice > 0 && p.SliceTokens > slice {
						t.Errorf("%s: slices of %d past --slice-tokens %d: %s", name, p.SliceTokens, slice, p)
					}
				}
			}
		}
	}
	if checked < 50 || refused == 0 {
		t.Errorf("%d plans checked, %d refused: the grid misses the budgets' edges", checked, refused)
	}
}

// TestPlanSharedMemory: on a backend that computes in host memory (the CPU's) with no --device-memory,
// the device budget is the host's less the reads' buffers, and every plan keeps all it holds (weights,
// carries, slices, state on the device and as bfloat16 apart, expert inputs, experts read ahead) within
// the host budget once: no slice's state is held twice, and a wave whose state does not fit splits into
// waves and says why. Given a device budget, the same wave keeps part of its state in host memory as on a
// device.
func TestPlanSharedMemory(t *testing.T) {
	e := openTiny(t, ops.BF16, EngineOptions{})
	act, state, _ := e.tokenBytes()
	reserve := e.hostReadBuffers()
	base := e.weightPeak(true) + e.carryBytes(4096, true) + reserve
	split, hostTier := 0, 0
	for _, sh := range []struct{ seqs, seqLen int }{{1, 100}, {16, 512}, {64, 1024}, {1, 20000}} {
		lens := make([]int, sh.seqs)
		for i := range lens {
			lens[i] = sh.seqLen
		}
		wave := int64(sh.seqs * sh.seqLen)
		for _, host := range []int64{base + 64*(act+state), base + wave*(act+state)/3, base + wave*(act+state)*2} {
			e.opts.DeviceMemory, e.opts.HostMemory, e.opts.SliceTokens = 0, host, 0
			name := fmt.Sprintf("%dx%d host %d", sh.seqs, sh.seqLen, host)
			p, err := e.planWave(lens)
			if err != nil {
				if !errors.Is(err, ErrBudget) {
					t.Errorf("%s: %v, not ErrBudget", name, err)
				}
				continue
			}
			if want := host - reserve; p.DeviceBudget != want {
				t.Errorf("%s: device budget %d, want the host budget less the read buffers, %d", name, p.DeviceBudget, want)
			}
			if p.HostBytes > 0 {
				hostTier++
				if p.DeviceSlices != 0 {
					t.Errorf("%s: %d slices' state on the device beside the state in host memory: %s", name, p.DeviceSlices, p)
				}
			}
			if all := p.DevicePeak + p.HostBytes + p.StashBytes + reserve + p.ExpertReadAhead; all > host {
				t.Errorf("%s: %d bytes held in all, over the host budget %d: %s", name, all, host, p)
			}
			if p.Waves > 1 {
				split++
				if !strings.Contains(p.wavesWhy, "memory budget") {
					t.Errorf("%s: %d waves, and the plan says %q", name, p.Waves, p.wavesWhy)
				}
			}
		}
	}
	if split == 0 || hostTier == 0 {
		t.Errorf("%d plans split a wave, %d kept state as bfloat16: the grid misses budgets too small for a wave's state", split, hostTier)
	}
	// the same kind of wave with a device budget of its own: the state goes off the device
	lens := make([]int, 64)
	for i := range lens {
		lens[i] = 1024
	}
	e.opts.DeviceMemory, e.opts.HostMemory = base+4096*act+65536*state/2, 1<<40
	if p, err := e.planWave(lens); err != nil || p.HostBytes == 0 {
		t.Errorf("with --device-memory: %v, want state in host memory: %s", err, p)
	}
}

// TestPlanLargerDevicePlans: a device budget larger than one that planned a wave plans it too. With the
// state partly in host memory, a larger budget once gave larger slices that left no room for a second
// slice's state on the device, and a sequence that a smaller budget had planned was refused.
func TestPlanLargerDevicePlans(t *testing.T) {
	e := openTiny(t, ops.BF16, EngineOptions{})
	lens := []int{4096, 4096, 4096, 4096}
	host := e.hostReadBuffers() + 4<<20 // room for the state of a few thousand tokens
	planned := int64(0)
	for dev := int64(30 << 20); dev <= 80<<20; dev += 1 << 20 {
		e.opts.DeviceMemory, e.opts.HostMemory = dev, host
		p, err := e.planWave(lens)
		switch {
		case err == nil && planned == 0:
			planned = dev
		case err != nil && planned > 0:
			t.Errorf("device budget %d refused after %d planned: %v", dev, planned, err)
		case err == nil && p.Longest > p.WaveTokens:
			t.Errorf("device budget %d: a wave of %d tokens for sequences of %d: %s", dev, p.WaveTokens, p.Longest, p)
		}
	}
	if planned == 0 {
		t.Fatal("no device budget planned the wave: the grid misses it")
	}
}

// TestSharedMemoryRun: a wave whose float32 state the CPU's one budget cannot hold beside a slice, but
// whose state as bfloat16 it can, runs in one read with that state kept apart (no slice's state on the
// "device" beside the running one's), and gives the bits of the wave run without a budget.
func TestSharedMemoryRun(t *testing.T) {
	seqs := randomSequences(9, 3328, 900, 700, 1200, 1000)
	lens := make([]int, len(seqs))
	for i, s := range seqs {
		lens[i] = len(s.Tokens)
	}
	o := Options{TopK: 5, Lens: []int{1}, Hidden: []int{0, 2}}
	want := runOne(t, openPreset(t, "tiny", 1, cpu.New(cpu.Options{Precision: ops.BF16}), EngineOptions{}), Request{Sequences: seqs, Options: o})
	e := openPreset(t, "tiny", 1, cpu.New(cpu.Options{Precision: ops.BF16}), EngineOptions{})
	act, state, _ := e.tokenBytes()
	base := e.hostReadBuffers() + e.weightPeak(true) + e.carryBytes(1200, true)
	var found WavePlan
	for host := base; host < base+3800*(act+state); host += 16 << 10 {
		e.opts.HostMemory = host
		if p, err := e.planWave(lens); err == nil && p.Waves == 1 && p.HostBytes > 0 {
			found = p
			break
		}
	}
	if found.HostBytes == 0 {
		t.Fatal("no host budget planned the wave in one read with its state kept apart")
	}
	t.Logf("plan %s", found)
	if found.DeviceSlices != 0 || found.Slices < 2 {
		t.Fatalf("plan %s: want slices, and no slice's state on the device beside the running one's", found)
	}
	got := runOne(t, e, Request{Sequences: seqs, Options: o})
	if !reflect.DeepEqual(got, want) {
		t.Errorf("plan %s: results differ from the wave run without a budget", found)
	}
}

// TestHostBudgetWarm: an engine that kept its state and read buffers from a wave plans the next one as it
// did cold, though the system now counts those buffers as used: they serve the next wave. The host
// budget is set just above what the cold plan needs in one read, so that counting the buffers out (run
// 135: a warm 1,048,576-token bench planned in two reads) splits the warm plan.
func TestHostBudgetWarm(t *testing.T) {
	lens := []int{300, 41, 700, 5, 1000}
	seqs := randomSequences(11, 3328, lens...)
	probe := openPreset(t, "tiny", 1, cpu.New(cpu.Options{}), EngineOptions{})
	act, state, hostState := probe.tokenBytes()
	total := 0
	for _, n := range lens {
		total += n
	}
	budget := quarterStateBudget(probe, act+state+hostState, total)
	e := openPreset(t, "tiny", 1, newCounting(ops.BF16), EngineOptions{SliceTokens: 300, DeviceMemory: budget, NoExpertPooling: true})
	avail := int64(1 << 40)
	own := func() int64 { return e.state.bytes() + e.pool.bytes() }
	e.hostAvail = func() int64 { return avail - own() } // the system counts the engine's buffers as used
	loose, err := e.PlanWave(lens)
	if err != nil {
		t.Fatal(err)
	}
	if !loose.HostState || loose.Waves != 1 {
		t.Fatalf("plan %s: want the state in host memory, one read", loose)
	}
	// just what the cold plan needs: its state, the reads' buffers, a little more
	avail = int64(float64(loose.HostBytes+loose.StashBytes+e.hostReadBuffers())/(1-memoryMargin)) + 4096
	cold, err := e.PlanWave(lens)
	if err != nil {
		t.Fatal(err)
	}
	if !cold.HostState || cold.Waves != 1 {
		t.Fatalf("cold plan %s: want the state in host memory, one read", cold)
	}
	if _, _, err := e.Run(context.Background(), []Request{{Sequences: seqs}}); err != nil {
		t.Fatal(err)
	}
	held := own()
	if e.state.bytes() < cold.HostBytes || e.pool.bytes() == 0 {
		t.Fatalf("the engine keeps %d bytes of state buffers and %d of read buffers after the wave, want at least its state's %d and some", e.state.bytes(), e.pool.bytes(), cold.HostBytes)
	}
	warm, err := e.PlanWave(lens)
	if err != nil {
		t.Fatal(err)
	}
	shape := func(p WavePlan) [6]int64 { // what the budget decides; its figure moves by the margin's share
		return [6]int64{int64(p.Waves), int64(p.WaveTokens), int64(p.SliceTokens), int64(p.DeviceSlices), p.HostBytes, p.DevicePeak}
	}
	if shape(warm) != shape(cold) || warm.HostBudget < cold.HostBudget {
		t.Errorf("with %d bytes of the engine's own buffers held, the plan changed:\n  cold %s\n  warm %s", held, cold, warm)
	}
}

// TestHostBudgetNamed: a plan split for the host budget names where the budget came from, --host-memory
// or the host's available memory, so that nobody looks for a flag they never set.
func TestHostBudgetNamed(t *testing.T) {
	lens := []int{300, 41, 700, 5, 1000}
	probe := openPreset(t, "tiny", 1, cpu.New(cpu.Options{}), EngineOptions{})
	act, state, hostState := probe.tokenBytes()
	device := quarterStateBudget(probe, act+state+hostState, 2046)
	small := probe.hostReadBuffers() + 2046*hostState/3 // a third of the wave's state beside the reads
	for _, c := range []struct {
		name string
		opts EngineOptions
		want string
	}{
		{"flag", EngineOptions{HostMemory: small}, "(--host-memory)"},
		{"system", EngineOptions{}, "(the host's available memory less 10%; --host-memory sets it)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opts.SliceTokens, c.opts.DeviceMemory = 300, device
			e := openPreset(t, "tiny", 1, newCounting(ops.BF16), c.opts)
			e.hostAvail = func() int64 { return int64(float64(small) / (1 - memoryMargin)) }
			p, err := e.PlanWave(lens)
			if err != nil {
				t.Fatal(err)
			}
			if p.Waves < 2 || !strings.Contains(p.String(), c.want) {
				t.Errorf("plan %s: want several reads, the budget named %q", p, c.want)
			}
		})
	}
}
