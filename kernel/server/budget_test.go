package server

import (
	"context"
	"sync"
	"testing"

	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestMemoryBudgetsGoToTheDefaultEngine: the host cache and resident-layer budgets reach the engine of
// the default precision only; the other precision's engine, opened by a request that asks for it, keeps
// no weights (two engines would pin the memory twice).
func TestMemoryBudgetsGoToTheDefaultEngine(t *testing.T) {
	var mu sync.Mutex
	got := map[ops.Precision]replay.EngineOptions{}
	cfg := Config{HostCacheBytes: 1 << 30, ResidentBytes: 1 << 29, PrefetchExperts: -1,
		Open: func(ctx context.Context, dir string, p ops.Precision, opts replay.EngineOptions) (*Opened, error) {
			mu.Lock()
			got[p] = opts
			mu.Unlock()
			return OpenCPU(ctx, dir, p, opts)
		}}
	ts := startServer(t, cfg, testHooks{})
	st := ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{9, 8, 7}}}, Options: api.Options{Precision: "fp32"}})
	ts.waitState(t, st.ID, api.StateDone)
	mu.Lock()
	defer mu.Unlock()
	bf, fp := got[ops.BF16], got[ops.FP32]
	if bf.HostCacheBytes != 1<<30 || bf.ResidentBytes != 1<<29 || bf.PrefetchExperts != -1 {
		t.Errorf("bf16 (default) engine options %+v; want the budgets", bf)
	}
	if fp.HostCacheBytes != 0 || fp.ResidentBytes != 0 || fp.PrefetchExperts != -1 {
		t.Errorf("fp32 engine options %+v; want no budgets", fp)
	}
}
