package replay

import (
	"reflect"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/ops/opstest"
)

// queuedCPU is the CPU backend with ops.RouteQueuer by the interface's contract, as late as it allows:
// QueueRoute only checks its arguments and the router runs in Wait. A caller that used the routing
// before Wait, or freed the router's inputs before it, fails or changes its results. It counts the
// routings queued and waited for.
type queuedCPU struct {
	*cpu.Backend
	queued, waited atomic.Int64
}

func (b *queuedCPU) QueueRoute(x, w, bias ops.Tensor, k int, scale float32) (ops.PendingRouting, error) {
	if err := ops.CheckRoute(x, w, bias, k); err != nil {
		return nil, err
	}
	b.queued.Add(1)
	p := &lateRoute{}
	p.run = func() {
		b.waited.Add(1)
		p.rt, p.err = b.Backend.Route(x, w, bias, k, scale)
	}
	return p, nil
}

// lateRoute is queuedCPU's pending routing: the router runs at the first Wait.
type lateRoute struct {
	once sync.Once
	run  func()
	rt   ops.Routing
	err  error
}

func (p *lateRoute) Wait() (ops.Routing, error) {
	p.once.Do(p.run)
	return p.rt, p.err
}

// TestQueueRouteConformance runs the ops suite on queuedCPU: its QueueRoute case, which a device
// backend's QueueRoute meets too, is checked here on a backend without a device.
func TestQueueRouteConformance(t *testing.T) {
	opstest.RunAll(t, func(p ops.Precision) ops.Backend { return &queuedCPU{Backend: cpu.New(cpu.Options{Precision: p})} })
}

// TestQueueRoute: on a backend with ops.RouteQueuer the model queues every MoE layer's router and waits
// for each routing it queued, whole, sliced and expert-major, with the plain backend's bits.
func TestQueueRoute(t *testing.T) {
	seqs := randomSequences(11, 3328, 90, 7, 130, 33)
	req := Request{Sequences: seqs, Options: Options{TopK: 3, Lens: []int{2, 4}, Router: true}}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), req)
	for _, eo := range []EngineOptions{{}, {SliceTokens: 40}, {SliceTokens: 40, ExpertMajor: true}} {
		b := &queuedCPU{Backend: cpu.New(cpu.Options{Precision: ops.BF16})}
		e := openPreset(t, "tiny", 1, b, eo)
		moe := e.Plan.MoELayers()
		got := runOne(t, e, req)
		q, w := b.queued.Load(), b.waited.Load()
		if moe == 0 || q < int64(moe) || w != q {
			t.Fatalf("slices of %d, expert-major %v: %d routings queued and %d waited for, %d MoE layers", eo.SliceTokens, eo.ExpertMajor, q, w, moe)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("slices of %d, expert-major %v: results with queued routing differ from the plain backend's", eo.SliceTokens, eo.ExpertMajor)
		}
		t.Logf("slices of %d, expert-major %v: %d routings queued and waited for (%d MoE layers), the same results", eo.SliceTokens, eo.ExpertMajor, q, moe)
	}
}
