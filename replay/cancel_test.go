package replay

import (
	"context"
	"errors"
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
