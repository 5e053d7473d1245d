package replay

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Reader is where the engine gets tensor bytes: a *checkpoint.Dir, or a wrapper around one in tests
// (fault injection, accounting).
type Reader interface {
	Lookup(name string) (checkpoint.Tensor, bool)
	ReadBatch(ctx context.Context, reqs []checkpoint.ReadRequest) error
}

// bundle is a set of tensors read ahead into host memory: one layer's non-expert weights. It implements
// model.Source for those tensors only, so a layer's upload never touches the disk.
type bundle struct {
	done  chan struct{}
	bytes map[string][]byte
	size  int64
	err   error
}

// readAhead starts reading specs in the background and returns at once; Read waits for it.
func readAhead(ctx context.Context, r Reader, specs []checkpoint.Spec, held *atomic.Int64) *bundle {
	b := &bundle{done: make(chan struct{}), bytes: make(map[string][]byte, len(specs))}
	go func() {
		defer close(b.done)
		reqs := make([]checkpoint.ReadRequest, 0, len(specs))
		for _, s := range specs {
			t, err := lookup(r, s)
			if err != nil {
				b.err = err
				return
			}
			buf := make([]byte, t.Size)
			b.bytes[s.Name] = buf
			b.size += t.Size
			reqs = append(reqs, checkpoint.ReadRequest{Tensor: t, Dst: buf})
		}
		held.Add(b.size)
		b.err = r.ReadBatch(ctx, reqs)
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
	raw, ok := b.bytes[s.Name]
	if !ok {
		return nil, fmt.Errorf("tensor %s: not read ahead with its layer", s.Name)
	}
	return raw, nil
}

// release drops the host copy once the layer is uploaded.
func (b *bundle) release(held *atomic.Int64) {
	<-b.done
	held.Add(-b.size)
	b.bytes = nil
}

// expertReader implements model.ExpertSource on a Reader: it reads the chosen experts' MXFP4 tensors
// concurrently, uploads them and counts the bytes.
type expertReader struct {
	r     Reader
	m     *model.Model
	bytes atomic.Int64 // expert bytes read
	count atomic.Int64 // experts read
}

// Experts implements model.ExpertSource.
func (x *expertReader) Experts(ctx context.Context, layer int, ids []int) ([]ops.Expert, error) {
	var reqs []checkpoint.ReadRequest
	bufs := make([]map[string][]byte, len(ids))
	var size int64
	for i, e := range ids {
		bufs[i] = make(map[string][]byte, 6)
		for _, s := range x.m.Plan.ExpertTensors(layer, e) {
			t, err := lookup(x.r, s)
			if err != nil {
				return nil, err
			}
			buf := make([]byte, t.Size)
			bufs[i][s.Name] = buf
			size += t.Size
			reqs = append(reqs, checkpoint.ReadRequest{Tensor: t, Dst: buf})
		}
	}
	if err := x.r.ReadBatch(ctx, reqs); err != nil {
		return nil, err
	}
	x.bytes.Add(size)
	x.count.Add(int64(len(ids)))
	out := make([]ops.Expert, 0, len(ids))
	for i, e := range ids { // uploads run on this goroutine: backends do not promise concurrent uploads
		ex, err := x.m.LoadExpert(ctx, layer, e, mapSource(bufs[i]))
		if err != nil {
			for _, done := range out {
				x.m.Ops.Free(done)
			}
			return nil, err
		}
		out = append(out, ex)
	}
	return out, nil
}

// mapSource serves tensor bytes already in memory.
type mapSource map[string][]byte

// Read implements model.Source.
func (m mapSource) Read(_ context.Context, s checkpoint.Spec) ([]byte, error) {
	raw, ok := m[s.Name]
	if !ok {
		return nil, fmt.Errorf("tensor %s: not loaded", s.Name)
	}
	return raw, nil
}
