package replay

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// A wave whose context is cancelled stops within one layer, even when no layer needs a read that would
// notice (every layer in the host cache after a first wave, or resident): before, such a wave ran to its
// last layer and readout after the cancel (9 s on a GPU); a cancel after the last layer still ran the
// readout (lm_head over the vocabulary, the longest step of a small wave) and returned results.
func TestCancelStopsWithinALayer(t *testing.T) {
	for _, tt := range []struct {
		opts EngineOptions
		at   int // the layer after which the cancel comes
	}{{EngineOptions{HostCacheBytes: 1 << 30}, 2}, {EngineOptions{ResidentBytes: 1 << 30}, 2}, {EngineOptions{HostCacheBytes: 1 << 30}, 8}} {
		opts := tt.opts
		var ctx context.Context
		var cancel context.CancelFunc
		var after []int // layers finished after the cancel
		cancelled := false
		opts.Progress = func(p Progress) {
			if cancelled {
				after = append(after, p.Layer)
			}
			if ctx != nil && p.Layer == tt.at {
				cancel()
				cancelled = true
			}
		}
		e := openPreset(t, "tiny", 1, cpu.New(cpu.Options{Precision: ops.BF16}), opts)
		req := Request{Sequences: randomSequences(3, 3328, 40, 17)}
		if _, _, err := e.Run(context.Background(), []Request{req}); err != nil { // fills the cache
			t.Fatal(err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		_, _, err := e.Run(ctx, []Request{req})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%+v: Run after a cancel at layer %d: -want context.Canceled +got %v", opts, tt.at, err)
		}
		if len(after) > 1 {
			t.Errorf("%+v: layers %v ran after the cancel, want at most the one in flight", opts, after)
		}
		// the engine is whole: the next wave is exact
		if _, _, err := e.Run(context.Background(), []Request{req}); err != nil {
			t.Errorf("after a cancel: %v", err)
		}
	}
}

// cancelAtAttention is the CPU backend cancelling a context as its first token-mixing op returns, and
// counting the FFN sublayer's ops that run after that.
type cancelAtAttention struct {
	*cpu.Backend
	cancel    context.CancelFunc
	cancelled atomic.Bool
	ffnAfter  atomic.Int64
}

func (b *cancelAtAttention) mixed() { b.cancel(); b.cancelled.Store(true) }

func (b *cancelAtAttention) ffn() {
	if b.cancelled.Load() {
		b.ffnAfter.Add(1)
	}
}

func (b *cancelAtAttention) KDA(q, k, v, graw, braw, aLog, dtBias ops.Tensor, heads int, lower float32, l ops.Layout) (ops.Tensor, error) {
	defer b.mixed()
	return b.Backend.KDA(q, k, v, graw, braw, aLog, dtBias, heads, lower, l)
}

func (b *cancelAtAttention) KDASlice(q, k, v, graw, braw, aLog, dtBias ops.Tensor, heads int, lower float32, l ops.SliceLayout, in ops.Carry) (ops.Tensor, ops.Carry, error) {
	defer b.mixed()
	return b.Backend.KDASlice(q, k, v, graw, braw, aLog, dtBias, heads, lower, l, in)
}

func (b *cancelAtAttention) MLA(q, kv, ks ops.Tensor, heads, nope, shared, vdim int, l ops.Layout) (ops.Tensor, error) {
	defer b.mixed()
	return b.Backend.MLA(q, kv, ks, heads, nope, shared, vdim, l)
}

func (b *cancelAtAttention) MLASlice(q, kv, ks, lat, kvb ops.Tensor, heads, nope, shared, vdim int, l ops.SliceLayout, in ops.Carry) (ops.Tensor, ops.Carry, error) {
	defer b.mixed()
	return b.Backend.MLASlice(q, kv, ks, lat, kvb, heads, nope, shared, vdim, l, in)
}

func (b *cancelAtAttention) SiTUGLU(gate, up ops.Tensor, beta, linBeta float32) (ops.Tensor, error) {
	b.ffn()
	return b.Backend.SiTUGLU(gate, up, beta, linBeta)
}

func (b *cancelAtAttention) Route(x, w, bias ops.Tensor, k int, scale float32) (ops.Routing, error) {
	b.ffn()
	return b.Backend.Route(x, w, bias, k, scale)
}

func (b *cancelAtAttention) ExpertsAccumulate(acc, z ops.Tensor, r ops.Routing, experts []ops.Expert, beta, linBeta float32) error {
	b.ffn()
	return b.Backend.ExpertsAccumulate(acc, z, r, experts, beta, linBeta)
}

// TestCancelStopsBetweenSublayers: a cancel during a layer's attention stops the wave before its FFN
// sublayer: on the CPU each half of a layer over a large wave takes many seconds (33 s a layer for
// 74,000 tokens of the small preset), and Ctrl-C waited for the whole layer.
func TestCancelStopsBetweenSublayers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := &cancelAtAttention{Backend: cpu.New(cpu.Options{Precision: ops.BF16}), cancel: cancel}
	e := openPreset(t, "tiny", 1, b, EngineOptions{})
	_, _, err := e.Run(ctx, []Request{{Sequences: randomSequences(3, 3328, 40, 17)}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run with a cancel in the first attention: %v, want context.Canceled", err)
	}
	if !b.cancelled.Load() {
		t.Fatal("no token-mixing op ran: the test cancels nothing")
	}
	if n := b.ffnAfter.Load(); n != 0 {
		t.Errorf("%d FFN ops ran after the cancel, want none", n)
	}
}

// cancelInKDA is the CPU backend cancelling a context as its first KDA starts, and keeping what that KDA
// returned.
type cancelInKDA struct {
	*cpu.Backend
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	opErr  error
}

func (b *cancelInKDA) kda(run func() error) error {
	first := false
	b.once.Do(func() {
		first = true
		b.cancel()
		<-b.ctx.Done()
	})
	err := run()
	if first {
		b.opErr = err
	}
	return err
}

func (b *cancelInKDA) KDA(q, k, v, graw, braw, aLog, dtBias ops.Tensor, heads int, lower float32, l ops.Layout) (out ops.Tensor, err error) {
	err = b.kda(func() error {
		out, err = b.Backend.KDA(q, k, v, graw, braw, aLog, dtBias, heads, lower, l)
		return err
	})
	return out, err
}

func (b *cancelInKDA) KDASlice(q, k, v, graw, braw, aLog, dtBias ops.Tensor, heads int, lower float32, l ops.SliceLayout, in ops.Carry) (out ops.Tensor, c ops.Carry, err error) {
	err = b.kda(func() error {
		out, c, err = b.Backend.KDASlice(q, k, v, graw, braw, aLog, dtBias, heads, lower, l, in)
		return err
	})
	return out, c, err
}

// TestCancelReachesTheBackend: the engine hands its context to a backend that computes in the process
// (ops.Interrupter), so a cancel can stop the op in flight rather than wait for it: one CPU op of a long
// sequence takes minutes (a single KDA or MLA of 1,048,576 tokens, hours). A cancel as a KDA starts makes
// that KDA return the cancel (the backend was told; replay/cpu's TestInterruptWithinATask stops an op
// midway), and so does Run; the engine is whole afterwards.
func TestCancelReachesTheBackend(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := &cancelInKDA{Backend: cpu.New(cpu.Options{Precision: ops.BF16}), ctx: ctx, cancel: cancel}
	e := openPreset(t, "tiny", 1, b, EngineOptions{})
	req := Request{Sequences: randomSequences(3, 3328, 40, 17)}
	_, _, err := e.Run(ctx, []Request{req})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run with a cancel in the first KDA: %v, want context.Canceled", err)
	}
	if !errors.Is(b.opErr, context.Canceled) {
		t.Fatalf("the KDA in flight at the cancel returned %v, want context.Canceled: the backend was not told", b.opErr)
	}
	if _, _, err := e.Run(context.Background(), []Request{req}); err != nil {
		t.Errorf("after a cancel: %v", err)
	}
}
