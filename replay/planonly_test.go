package replay

import (
	"context"
	"errors"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// freeDevice is the CPU backend as a device with free memory of its own (ops.DeviceMemory): a fixed
// figure, as a device would report it after (or before) the globals' upload.
type freeDevice struct {
	*cpu.Backend
	free int64
}

func (f freeDevice) FreeDeviceMemory() (int64, error) { return f.free, nil }

// TestPlanOnly: an engine opened with PlanOnly loads no globals, plans every wave as an engine that
// loaded them (on the same budgets, and on a device whose free memory still holds the globals' room),
// and refuses to run or pin buffers with ErrPlanOnly.
func TestPlanOnly(t *testing.T) {
	lens := [][]int{{1}, {64, 65, 5}, {3000}, {400, 400, 400, 400, 400, 400}}
	budgets := []EngineOptions{
		{DeviceMemory: 64 << 20, HostMemory: 1 << 30},
		{DeviceMemory: 6 << 20, HostMemory: 64 << 20, SliceTokens: 256},
		{DeviceMemory: 3 << 20, HostMemory: 1 << 30, MaxWaveTokens: 1024},
	}
	for i, opts := range budgets {
		full := openTiny(t, ops.BF16, opts)
		po := opts
		po.PlanOnly = true
		plan := openTiny(t, ops.BF16, po)
		if plan.globals != nil {
			t.Fatal("PlanOnly loaded the globals")
		}
		for _, l := range lens {
			want, werr := full.PlanWave(l)
			got, gerr := plan.PlanWave(l)
			if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
				t.Errorf("budgets %d, %v: PlanOnly's error %v, the engine's %v", i, l, gerr, werr)
				continue
			}
			if werr == nil && got.String() != want.String() {
				t.Errorf("budgets %d, %v: PlanOnly plans\n  %s\nthe engine\n  %s", i, l, got, want)
			}
		}
	}

	// The default device budget: free memory after the upload on the engine that ran, before it on the
	// PlanOnly engine, which counts the globals' room as taken.
	full := openTiny(t, ops.BF16, EngineOptions{})
	globals := full.uploaded() - full.kept.bytes()
	if globals <= 0 {
		t.Fatalf("the tiny preset's globals: %d bytes", globals)
	}
	const free = 40 << 20
	fullDev := openPreset(t, "tiny", 1, freeDevice{cpu.New(cpu.Options{Precision: ops.BF16}), free - globals}, EngineOptions{HostMemory: 1 << 30})
	planDev := openPreset(t, "tiny", 1, freeDevice{cpu.New(cpu.Options{Precision: ops.BF16}), free}, EngineOptions{HostMemory: 1 << 30, PlanOnly: true})
	if a, b := fullDev.deviceBudget(), planDev.deviceBudget(); a != b {
		t.Errorf("device budget: PlanOnly %d, the engine %d", b, a)
	}
	for _, l := range lens {
		want, werr := fullDev.PlanWave(l)
		got, gerr := planDev.PlanWave(l)
		if werr != nil || gerr != nil {
			t.Fatalf("%v: %v, %v", l, werr, gerr)
		}
		if got.String() != want.String() {
			t.Errorf("%v on a device: PlanOnly plans\n  %s\nthe engine\n  %s", l, got, want)
		}
	}

	plan := openTiny(t, ops.BF16, EngineOptions{PlanOnly: true})
	if _, _, err := plan.Run(context.Background(), []Request{{Sequences: randomSequences(1, 3328, 5)}}); !errors.Is(err, ErrPlanOnly) {
		t.Errorf("Run on a PlanOnly engine: %v, want ErrPlanOnly", err)
	}
	if _, err := plan.PinHostBuffers([]int{5}); !errors.Is(err, ErrPlanOnly) {
		t.Errorf("PinHostBuffers on a PlanOnly engine: %v, want ErrPlanOnly", err)
	}
}
