package replay

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// countingReader counts the tensor bytes read through it.
type countingReader struct {
	*checkpoint.Dir
	bytes atomic.Int64
}

func (c *countingReader) ReadBatch(ctx context.Context, reqs []checkpoint.ReadRequest) error {
	for _, r := range reqs {
		c.bytes.Add(r.Tensor.Size)
	}
	return c.Dir.ReadBatch(ctx, reqs)
}

// pinnedBackend is hostMemBackend without the scribble over uploaded bytes (the host cache hands the
// same bytes to every wave, so it relies on backends reading, never writing, what they upload), with
// ops.StableHostMemory, and counting the experts uploaded and freed.
type pinnedBackend struct {
	*hostMemBackend
	stable                  map[uintptr]bool
	experts, freed, batches atomic.Int64
}

func newPinnedBackend() *pinnedBackend {
	return &pinnedBackend{hostMemBackend: newHostMemBackend(ops.BF16), stable: map[uintptr]bool{}}
}

func (p *pinnedBackend) Upload(dt ops.DType, rows, cols int, raw []byte) (ops.Tensor, error) {
	return p.hostMemBackend.Backend.Upload(dt, rows, cols, raw)
}

func (p *pinnedBackend) UploadExpert(id, latent, ffn int, w1p, w1s, w3p, w3s, w2p, w2s []byte) (ops.Expert, error) {
	x, err := p.hostMemBackend.UploadExpert(id, latent, ffn, w1p, w1s, w3p, w3s, w2p, w2s)
	if err == nil {
		p.experts.Add(1)
	}
	return x, err
}

// UploadExperts makes the engine take its batch path (model.LoadExperts); it counts the batches.
func (p *pinnedBackend) UploadExperts(latent, ffn int, parts []ops.ExpertParts) ([]ops.Expert, error) {
	p.batches.Add(1)
	var out []ops.Expert
	for _, x := range parts {
		e, err := p.UploadExpert(x.ID, latent, ffn, x.W1Packed, x.W1Scale, x.W3Packed, x.W3Scale, x.W2Packed, x.W2Scale)
		if err != nil {
			for _, done := range out {
				p.Free(done)
			}
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func (p *pinnedBackend) Free(t any) {
	if _, ok := t.(ops.Expert); ok {
		p.freed.Add(1)
	}
	p.hostMemBackend.Free(t)
}

func (p *pinnedBackend) MarkStable(b []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := uintptr(unsafe.Pointer(&b[0]))
	if p.live[a] != len(b) {
		return errors.New("MarkStable: not a whole live buffer")
	}
	p.stable[a] = true
	return nil
}

// TestHostCache: with a host cache as large as the model, the second wave reads nothing from the
// checkpoint and every byte it sends to the backend comes from the cache; with a budget of a few layers,
// the first layers are cached and the rest read again; the results equal an engine without a cache bit
// for bit in every case, no cache grows past its budget, and Close frees every host buffer.
func TestHostCache(t *testing.T) {
	dir := synthModel(t, "tiny", 1)
	plan, err := model.ReadFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	var total int64 // the layers' tensors and experts: what a full cache holds at least
	dims := plan.Dims()
	for i, ly := range plan.Layers {
		for _, s := range plan.LayerTensors(i) {
			total += s.Bytes()
		}
		if ly.FFN != model.MoE {
			continue
		}
		for e := range dims.Experts {
			for _, s := range plan.ExpertTensors(i, e) {
				total += s.Bytes()
			}
		}
	}
	seqs := randomSequences(5, 3328, 300, 41, 7) // enough tokens that every layer chooses every expert
	opts := Options{TopK: 3, Hidden: []int{2}, Lens: []int{1}, Router: true}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), Request{Sequences: seqs, Options: opts})
	for _, tc := range []struct {
		name           string
		budget         int64
		chunk, prefech int
		full           bool // every byte of the second wave from the cache
	}{
		{"whole model", 4 * total, 0, 0, true},
		{"whole model, chunks of 3", 4 * total, 3, 0, true},
		{"whole model, chunks of 3, 4 fetched ahead", 4 * total, 3, 4, true},
		{"whole model, all fetched ahead", 4 * total, 0, 1 << 20, true},
		{"a fifth", total / 5, 4, 0, false},
		{"a fifth, 5 fetched ahead", total / 5, 4, 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			r := &countingReader{Dir: d}
			h := newPinnedBackend()
			e, err := NewEngine(context.Background(), plan, r, h, EngineOptions{HostCacheBytes: tc.budget, ExpertChunk: tc.chunk, PrefetchExperts: tc.prefech})
			if err != nil {
				t.Fatal(err)
			}
			for wave := range 3 {
				before := r.bytes.Load()
				got, st, err := e.Run(context.Background(), []Request{{Sequences: seqs, Options: opts}})
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("wave %d: results differ from the engine without a host cache", wave)
				}
				read, cached := r.bytes.Load()-before, sum(st.CachedBytes)
				t.Logf("wave %d: %d bytes sent, %d from the cache, %d read; cache %d of %d", wave, st.BytesRead(), cached, read, e.HostCacheBytes(), tc.budget)
				switch {
				case e.HostCacheBytes() > tc.budget:
					t.Errorf("wave %d: the cache holds %d bytes, past its budget of %d", wave, e.HostCacheBytes(), tc.budget)
				case wave == 0 && cached != 0:
					t.Errorf("wave 0: %d bytes from an empty cache", cached)
				case wave > 0 && tc.full && (read != 0 || cached != st.BytesRead()):
					t.Errorf("wave %d: %d bytes read and %d of %d from the cache; want 0 read, all cached", wave, read, cached, st.BytesRead())
				case wave > 0 && !tc.full && (cached == 0 || read == 0 || read+cached != st.BytesRead()):
					t.Errorf("wave %d: %d bytes read and %d from the cache for %d sent; want some of each, adding up", wave, read, cached, st.BytesRead())
				}
				if !tc.full && wave > 0 && st.CachedBytes[0] == 0 {
					t.Errorf("wave %d: layer 0 not from the cache; the first layers read should stay", wave)
				}
				if e.HeldBytes() != 0 {
					t.Errorf("wave %d: %d bytes held after the wave", wave, e.HeldBytes())
				}
			}
			if up, freed := h.experts.Load(), h.freed.Load(); up != freed {
				t.Errorf("%d experts uploaded, %d freed: the difference leaked", up, freed)
			}
			if len(h.stable) == 0 {
				t.Error("no cached buffer was marked stable")
			}
			if tc.full && h.batches.Load() == 0 {
				t.Error("no expert was uploaded from the cache in a batch")
			}
			e.Close()
			if n := len(h.live); n != 0 || e.HostCacheBytes() != 0 {
				t.Errorf("after Close: %d host buffers live, cache %d bytes", n, e.HostCacheBytes())
			}
		})
	}
}

func sum(xs []int64) int64 {
	var n int64
	for _, x := range xs {
		n += x
	}
	return n
}

// TestHostCacheRoom: the host budget's reserve for the cache's growth is its budget's room only while it
// lacks part of the model: once a wave has cached every layer and expert, the reserve is the reads' own
// buffers alone, though the budget (1 GiB) has room left far beyond the tiny model.
func TestHostCacheRoom(t *testing.T) {
	e := openTiny(t, ops.BF16, EngineOptions{HostCacheBytes: 1 << 30})
	var own int64
	for i := range e.Plan.Layers {
		o, _ := e.Plan.LayerBytes(i)
		own = max(own, o)
	}
	base := 2*own + (readsAhead+2)*int64(expertBatch)*aheadBytesPerExpert(e.Plan) // hostReadBuffers without the cache
	var model int64
	for i := range e.Plan.Layers {
		o, x := e.Plan.LayerBytes(i)
		model += o + x
	}
	if cold := e.hostReadBuffers() - base; cold < model || cold >= 1<<30 {
		t.Errorf("cold cache: reserve %d bytes for its growth, want the model's %d and its pages at most, not the budget's room", cold, model)
	}
	runOne(t, e, Request{Sequences: randomSequences(53, 3328, 2000), Options: Options{TopK: 2}})
	moe := e.Plan.MoELayers()
	if e.cache.expertCount() != moe*e.Model.Dims.Experts || len(e.cache.layers) != len(e.Plan.Layers) {
		t.Fatalf("after a wave of 2,000 tokens the cache holds %d of %d experts and %d of %d layers", e.cache.expertCount(), moe*e.Model.Dims.Experts, len(e.cache.layers), len(e.Plan.Layers))
	}
	if got := e.hostReadBuffers(); got != base {
		t.Errorf("the cache holding the whole model (%d bytes of a 1 GiB budget): reserve %d, want the reads' own %d", e.cache.bytes(), got, base)
	}
}
