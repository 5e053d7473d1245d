package replay

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
)

// Reader is where the engine gets tensor bytes: a *checkpoint.Dir, or a wrapper around one in tests
// (fault injection, accounting).
type Reader interface {
	Lookup(name string) (checkpoint.Tensor, bool)
	ReadBatch(ctx context.Context, reqs []checkpoint.ReadRequest) error
}

// bundle is a set of tensors read ahead into one host arena of the pool: one layer's non-expert weights.
// It implements model.Source for those tensors only, so a layer's upload never touches the disk, and
// model.Prechecked: the read-ahead goroutine scans the BF16 and F32 tensors for NaN and Inf right after
// reading them, while the previous layer still computes, instead of the loader doing it on the way to
// the device.
type bundle struct {
	done  chan struct{}
	bytes map[string][]byte
	bad   map[string]error // tensors that are not finite: their *model.NonFiniteError
	size  int64            // tensor bytes (what HeldBytes counts while the bundle is held)
	held  int64            // what this bundle added to the engine's held counter
	arena []byte           // from the pool; nil before it is taken or after release
	err   error
	layer int  // the layer these tensors belong to; -1 for the globals (never cached)
	hit   bool // served from the host cache: no arena, nothing read, nothing held
}

// readAhead starts reading specs (the tensors of layer, or of the globals when layer is -1) into an arena
// of pool in the background and returns at once; Read waits for it. A layer the host cache holds is
// served from there, read from nothing.
func readAhead(ctx context.Context, r Reader, specs []checkpoint.Spec, pool *hostPool, held *atomic.Int64, cache *hostCache, layer int) *bundle {
	b := &bundle{done: make(chan struct{}), bytes: make(map[string][]byte, len(specs)), layer: layer}
	if src, ok := cache.layer(layer); ok && layer >= 0 {
		b.bytes, b.hit = src, true
		for _, s := range specs {
			b.size += int64(len(src[s.Name]))
		}
		close(b.done)
		return b
	}
	go func() {
		defer close(b.done)
		ts := make([]checkpoint.Tensor, len(specs))
		for i, s := range specs {
			t, err := lookup(r, s)
			if err != nil {
				b.err = err
				return
			}
			ts[i] = t
			b.size += t.Size
		}
		l := layout(ts)
		if b.arena, b.err = pool.get(l.size); b.err != nil {
			return
		}
		b.held = b.size
		held.Add(b.held)
		reqs := make([]checkpoint.ReadRequest, len(specs))
		for i, s := range specs {
			buf := l.slice(b.arena, ts, i)
			b.bytes[s.Name] = buf
			reqs[i] = checkpoint.ReadRequest{Tensor: ts[i], Dst: buf}
		}
		if b.err = r.ReadBatch(ctx, reqs); b.err != nil {
			return
		}
		for i, s := range specs {
			if err := model.CheckFinite(s.DType, b.bytes[s.Name]); err != nil {
				if b.bad == nil {
					b.bad = map[string]error{}
				}
				b.bad[s.Name] = fmt.Errorf("in %s: %w", ts[i].File, err) // the loader names the tensor
			}
		}
	}()
	return b
}

// lookup finds the tensor s names and checks it is what s says.
func lookup(r Reader, s checkpoint.Spec) (checkpoint.Tensor, error) {
	t, ok := r.Lookup(s.Name)
	if !ok {
		return t, fmt.Errorf("tensor %s: missing from the checkpoint", s.Name)
	}
	if t.DType != s.DType || !slices.Equal(t.Shape, s.Shape) {
		return t, fmt.Errorf("tensor %s: want %s %s, got %s %s in %s", s.Name,
			checkpoint.ShapeString(s.Shape), s.DType, checkpoint.ShapeString(t.Shape), t.DType, t.File)
	}
	return t, nil
}

// wait blocks until the read is over and returns its error.
func (b *bundle) wait(ctx context.Context) error {
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Read implements model.Source.
func (b *bundle) Read(ctx context.Context, s checkpoint.Spec) ([]byte, error) {
	if err := b.wait(ctx); err != nil {
		return nil, err
	}
	if err := b.bad[s.Name]; err != nil {
		return nil, err
	}
	raw, ok := b.bytes[s.Name]
	if !ok {
		return nil, fmt.Errorf("tensor %s: not read ahead with its layer", s.Name)
	}
	return raw, nil
}

// FiniteChecked implements model.Prechecked: Read returns only bytes already scanned for NaN and Inf.
func (b *bundle) FiniteChecked() {}

// release gives the arena back to the pool once the layer is uploaded (backends keep no reference to
// the bytes they upload, ops.Backend's contract), or to the host cache when it has room and every tensor
// was read and checked.
func (b *bundle) release(pool *hostPool, held *atomic.Int64, cache *hostCache) {
	if b == nil { // a resident layer: nothing was read
		return
	}
	<-b.done
	held.Add(-b.held)
	b.held = 0
	if b.hit {
		b.bytes = nil
		return
	}
	if b.layer >= 0 && b.err == nil && b.bad == nil && cache.keepLayer(pool, b.layer, b.arena, b.bytes) {
		pool.disown(b.arena)
	} else {
		pool.put(b.arena)
	}
	b.arena, b.bytes = nil, nil
}

// mapSource serves tensor bytes already in memory.
type mapSource map[string][]byte

// size is the bytes of all its tensors.
func (m mapSource) size() int64 {
	var n int64
	for _, b := range m {
		n += int64(len(b))
	}
	return n
}

// Read implements model.Source.
func (m mapSource) Read(_ context.Context, s checkpoint.Spec) ([]byte, error) {
	raw, ok := m[s.Name]
	if !ok {
		return nil, fmt.Errorf("tensor %s: not loaded", s.Name)
	}
	return raw, nil
}
