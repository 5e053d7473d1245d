package replay

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/synth"
)

// tensorCounter counts the reads of every tensor through it, and calls hook (when set) before each
// batch whose first tensor is a routed expert's.
type tensorCounter struct {
	*checkpoint.Dir
	mu    sync.Mutex
	reads map[string]int
	hook  func(ctx context.Context, first string) error
}

func (c *tensorCounter) ReadBatch(ctx context.Context, reqs []checkpoint.ReadRequest) error {
	c.mu.Lock()
	if c.reads == nil {
		c.reads = map[string]int{}
	}
	for _, r := range reqs {
		c.reads[r.Tensor.Name]++
	}
	hook := c.hook
	c.mu.Unlock()
	if hook != nil && len(reqs) > 0 && strings.Contains(reqs[0].Tensor.Name, ".experts.") {
		if err := hook(ctx, reqs[0].Tensor.Name); err != nil {
			return err
		}
	}
	return c.Dir.ReadBatch(ctx, reqs)
}

// take returns the counts so far and starts again.
func (c *tensorCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.reads
	c.reads = nil
	return r
}

// openCounted opens the tiny preset through a tensorCounter on backend b.
func openCounted(t *testing.T, b ops.Backend, opts EngineOptions) (*Engine, *tensorCounter) {
	t.Helper()
	plan, d := openSynth(t, "tiny", 1) // d closes at the test's end, after the engine
	c := &tensorCounter{Dir: d}
	e, err := NewEngine(context.Background(), plan, c, b, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	c.take()
	return e, c
}

// slabWhole reports an error when a slot of the read-ahead is still in use or a byte still held: after a
// wave, however it ended, every slot is idle.
func slabWhole(e *Engine) error {
	if e.slab.n != len(e.slab.idle) || e.HeldBytes() != 0 {
		return errors.New("read-ahead buffers in use or bytes held after the wave")
	}
	return nil
}

// TestExpertReadAheadSameBits: with experts read from the checkpoint ahead of the router (batches of 3
// experts, a budget of a whole layer and one of two batches, which makes the reads wait for uploads and
// leaves the router's chunks to read the rest themselves), in slices or whole and in expert chunks, the
// results and the expert bytes sent are those without it, every tensor is read once a wave, the plan
// says so, and nothing is held afterwards.
func TestExpertReadAheadSameBits(t *testing.T) {
	seqs := randomSequences(51, 3328, 90, 7, 40)
	req := Request{Sequences: seqs, Options: Options{TopK: 3, Lens: []int{2}, Router: true}}
	off, _ := openCounted(t, cpu.New(cpu.Options{Precision: ops.BF16}), EngineOptions{ExpertReadAhead: -1})
	want, wst, err := off.Run(context.Background(), []Request{req})
	if err != nil {
		t.Fatal(err)
	}
	slot := 3*aheadBytesPerExpert(off.Plan) + arenaAlign // a batch of 3, whole pages
	for _, tt := range []struct {
		name string
		opts EngineOptions
	}{
		{"whole layer", EngineOptions{}},
		{"one batch, sliced", EngineOptions{ExpertReadAhead: slot, SliceTokens: 32}},
		{"sliced, chunks of 5", EngineOptions{SliceTokens: 50, ExpertChunk: 5}},
		{"unsliced, chunks of 4, two batches", EngineOptions{ExpertReadAhead: 2 * slot, ExpertChunk: 4}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var plans []string
			opts := tt.opts
			opts.Log = func(s string) { plans = append(plans, s) }
			e, c := openCounted(t, cpu.New(cpu.Options{Precision: ops.BF16}), opts)
			e.aheadBatch = 3
			for wave := range 2 {
				got, st, err := e.Run(context.Background(), []Request{req})
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("wave %d: results differ from a wave without read-ahead", wave)
				}
				if !reflect.DeepEqual(st.ExpertBytes, wst.ExpertBytes) || !reflect.DeepEqual(st.ExpertsRead, wst.ExpertsRead) {
					t.Errorf("wave %d: expert bytes %v, experts %v; want %v, %v as without read-ahead", wave, st.ExpertBytes, st.ExpertsRead, wst.ExpertBytes, wst.ExpertsRead)
				}
				if st.ReadAheadBytes == 0 || st.ReadAheadBytes > st.BytesRead() {
					t.Errorf("wave %d: %d bytes read ahead and sent, of %d: want some", wave, st.ReadAheadBytes, st.BytesRead())
				}
				var read int64
				for name, n := range c.take() {
					if n != 1 {
						t.Errorf("wave %d: tensor %s read %d times, want once", wave, name, n)
					}
					if tn, _ := e.reader.Lookup(name); strings.Contains(name, ".experts.") {
						read += tn.Size
					}
				}
				if sent := sum(st.ExpertBytes); read != sent+st.ReadAheadUnused {
					t.Errorf("wave %d: %d expert bytes read, want the %d sent + %d read ahead unused", wave, read, sent, st.ReadAheadUnused)
				}
				if err := slabWhole(e); err != nil {
					t.Errorf("wave %d: %v", wave, err)
				}
			}
			if len(plans) == 0 || !strings.Contains(plans[0], "experts read ahead from disk") {
				t.Errorf("plan %q does not say the experts are read ahead", plans)
			}
			if e.slab.n > int(e.plan.ExpertReadAhead/int64(e.slab.size)) {
				t.Errorf("%d read-ahead buffers of %d bytes, over the budget of %d", e.slab.n, e.slab.size, e.plan.ExpertReadAhead)
			}
		})
	}
}

// TestExpertReadAheadOnlyForLargeWaves: a wave too small to choose nearly every expert (tokens x top-k
// below 4 x experts), or a host budget without room, reads nothing ahead, and says nothing of it.
func TestExpertReadAheadOnlyForLargeWaves(t *testing.T) {
	e := openTiny(t, ops.BF16, EngineOptions{})
	small, err := e.PlanWave([]int{15}) // 15 x 4 < 4 x 16
	if err != nil {
		t.Fatal(err)
	}
	large, err := e.PlanWave([]int{16})
	if err != nil {
		t.Fatal(err)
	}
	if small.ExpertReadAhead != 0 || strings.Contains(small.String(), "read ahead") || large.ExpertReadAhead == 0 {
		t.Errorf("read-ahead %d bytes for 15 tokens, %d for 16: want none, then some", small.ExpertReadAhead, large.ExpertReadAhead)
	}
	tight := openTiny(t, ops.BF16, EngineOptions{HostMemory: 1 << 20, DeviceMemory: 1 << 30})
	if p, err := tight.PlanWave([]int{100}); err != nil || p.ExpertReadAhead != 0 {
		t.Errorf("a host budget of 1 MiB: read-ahead %d bytes (%v), want none", p.ExpertReadAhead, err)
	}
}

// TestExpertReadAheadWithHostCache: the experts read ahead fill the host cache as those read after the
// router do, so a second wave reads no expert from the checkpoint, with the same bits, and keeps no
// read-ahead buffer it did not use.
func TestExpertReadAheadWithHostCache(t *testing.T) {
	req := Request{Sequences: randomSequences(52, 3328, 120), Options: Options{TopK: 2}}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{ExpertReadAhead: -1}), req)
	e, c := openCounted(t, cpu.New(cpu.Options{Precision: ops.BF16}), EngineOptions{HostCacheBytes: 1 << 30, PrefetchExperts: -1})
	e.aheadBatch = 4
	for wave := range 2 {
		if got := runOne(t, e, req); !reflect.DeepEqual(got, want) {
			t.Fatalf("wave %d: results differ", wave)
		}
		reads := c.take()
		experts := 0
		for name := range reads {
			if strings.Contains(name, ".experts.") {
				experts++
			}
		}
		if (wave == 0) != (experts > 0) {
			t.Errorf("wave %d: %d expert tensors read from the checkpoint", wave, experts)
		}
		if wave > 0 && e.slab.n != 0 {
			t.Errorf("wave %d read nothing ahead and keeps %d read-ahead buffers", wave, e.slab.n)
		}
		// once the cache holds every expert, a wave plans no read-ahead and pins no buffer for one
		if wave > 0 && (e.plan.ExpertReadAhead != 0 || !strings.Contains(e.plan.String(), "the host cache holds every routed expert")) {
			t.Errorf("wave %d, the cache holding every expert: plan %s", wave, e.plan)
		}
		if n, err := e.PinHostBuffers([]int{120}); wave > 0 && (n != 0 || err != nil) {
			t.Errorf("wave %d: PinHostBuffers with every expert cached: %d bytes, %v", wave, n, err)
		}
		if err := slabWhole(e); err != nil {
			t.Error(err)
		}
	}
}

// leakBackend is the CPU backend (a Slicer) counting the weight bytes it holds, and calling fire before
// its fireAt-th expert upload.
type leakBackend struct {
	*cpu.Backend
	liveBytes
	uploads, fireAt int
	fire            func()
}

func (l *leakBackend) Upload(dt ops.DType, rows, cols int, raw []byte) (ops.Tensor, error) {
	t, err := l.Backend.Upload(dt, rows, cols, raw)
	if err == nil {
		l.add(t, int64(len(raw)))
	}
	return t, err
}

func (l *leakBackend) UploadExpert(id, latent, ffn int, w1p, w1s, w3p, w3s, w2p, w2s []byte) (ops.Expert, error) {
	if l.uploads++; l.uploads == l.fireAt && l.fire != nil {
		l.fire()
	}
	x, err := l.Backend.UploadExpert(id, latent, ffn, w1p, w1s, w3p, w3s, w2p, w2s)
	if err == nil {
		l.add(x, int64(len(w1p)+len(w1s)+len(w3p)+len(w3s)+len(w2p)+len(w2s)))
	}
	return x, err
}

func (l *leakBackend) Free(t any) {
	l.drop(t)
	l.Backend.Free(t)
}

// TestExpertReadAheadStops: a wave cancelled while experts are read ahead (from the read itself) or
// while they are uploaded from the read-ahead (from the backend), and a read that fails in the middle
// of the read-ahead, end the wave with that error (the failed read's file and tensor named), leave no
// buffer in use, no byte held and no weight on the backend, and the next wave has the same bits, each
// tensor read once.
func TestExpertReadAheadStops(t *testing.T) {
	req := Request{Sequences: randomSequences(53, 3328, 80, 30), Options: Options{TopK: 2}}
	off := openTiny(t, ops.BF16, EngineOptions{ExpertReadAhead: -1})
	want, wst, err := off.Run(context.Background(), []Request{req})
	if err != nil {
		t.Fatal(err)
	}
	const layer = 3
	if off.Plan.Layers[layer].FFN != model.MoE {
		t.Fatalf("layer %d of tiny is not a MoE layer", layer)
	}
	victim := model.ExpertPrefix(layer, 6) // in the third batch of 3 of its layer
	before := 0                            // experts uploaded before layer 3
	for i := range layer {
		before += wst.ExpertsRead[i]
	}
	for _, tt := range []struct {
		name   string
		read   bool // the fault comes from the reader; else from the backend's upload
		cancel bool
	}{{"cancel mid-read", true, true}, {"cancel mid-upload", false, true}, {"read error", true, false}} {
		t.Run(tt.name, func(t *testing.T) {
			lb := &leakBackend{Backend: cpu.New(cpu.Options{Precision: ops.BF16})}
			e, c := openCounted(t, lb, EngineOptions{SliceTokens: 40})
			e.aheadBatch = 3
			lb.reset()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.read {
				c.hook = func(ctx context.Context, first string) error {
					if !strings.HasPrefix(first, victim) {
						return nil
					}
					err := errInjected
					if tt.cancel {
						cancel()
						<-ctx.Done()
						err = ctx.Err()
					}
					return &checkpoint.ReadError{File: "the-shard.safetensors", Tensor: first, Err: err}
				}
			} else {
				lb.fireAt, lb.fire = before+7, cancel
			}
			_, _, err := e.Run(ctx, []Request{req})
			switch {
			case tt.cancel && !errors.Is(err, context.Canceled):
				t.Errorf("Run = %v, want context.Canceled", err)
			case !tt.cancel && (!errors.Is(err, errInjected) || !strings.Contains(err.Error(), victim) || !strings.Contains(err.Error(), ".safetensors")):
				t.Errorf("Run = %v, want the injected error naming the file and the tensor %s*", err, victim)
			}
			if err := slabWhole(e); err != nil {
				t.Error(err)
			}
			if lb.held != 0 {
				t.Errorf("%d bytes of weights still on the backend after the failed wave", lb.held)
			}
			c.hook, lb.fire = nil, nil
			c.take()
			if got := runOne(t, e, req); !reflect.DeepEqual(got, want) {
				t.Error("the next wave's results differ")
			}
			for name, n := range c.take() {
				if n != 1 {
					t.Errorf("next wave: tensor %s read %d times", name, n)
				}
			}
		})
	}
}

// TestExpertReadAheadBudgetAtK3Size: at K3's sizes (the k3-layer preset's plan, no weights) a wave of
// 1,048,576 tokens may read a whole MoE layer's experts ahead (56 batches of 16: 15.8 GB) when the host
// budget has room, what the budget leaves after the other read buffers when it has less, and none (the
// plan line saying why) below one batch.
func TestExpertReadAheadBudgetAtK3Size(t *testing.T) {
	pr, err := synth.LookupPreset("k3-layer")
	if err != nil {
		t.Fatal(err)
	}
	c, err := pr.TextConfig(3)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := model.NewPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	e := &Engine{Plan: plan, Model: model.New(plan, cpu.New(cpu.Options{})), pool: newHostPool(nil)}
	slot := e.aheadSlotBytes()
	for _, tt := range []struct {
		host       int64
		tokens     int
		wantSlots  int64
		wantReason bool
	}{{100e9, 1 << 20, 56, false}, {12e9, 1 << 20, -1, false}, {5e9, 1 << 20, 0, true}, {100e9, 223, 0, false}} {
		p := WavePlan{Tokens: tt.tokens, WaveTokens: tt.tokens, HostBudget: tt.host}
		got, why := e.readAheadBudget(p)
		switch {
		case tt.wantSlots >= 0 && got != tt.wantSlots*slot:
			t.Errorf("host %s, %d tokens: %d bytes (%d batches), want %d batches", numtext.Bytes(tt.host), tt.tokens, got, got/slot, tt.wantSlots)
		case tt.wantSlots < 0 && (got <= 0 || got >= 56*slot || got%slot != 0):
			t.Errorf("host %s: %d bytes, want part of a layer, in whole batches", numtext.Bytes(tt.host), got)
		case (why != "") != tt.wantReason:
			t.Errorf("host %s, %d tokens: reason %q", numtext.Bytes(tt.host), tt.tokens, why)
		}
	}
}

// TestExpertReadAheadBeforeTheRouter: the experts of MoE layer i+1 are read while layer i still runs
// (here: while the progress callback after layer i holds the wave), not once layer i+1's router has
// chosen them; and with the read-ahead off they are not.
func TestExpertReadAheadBeforeTheRouter(t *testing.T) {
	for _, on := range []bool{true, false} {
		var mu sync.Mutex
		readFor := map[string]bool{} // the layer prefixes whose experts were read
		changed := make(chan struct{}, 1)
		var early, moe int
		var e *Engine
		opts := EngineOptions{SliceTokens: 32}
		if !on {
			opts.ExpertReadAhead = -1
		}
		opts.Progress = func(p Progress) {
			if p.Layer >= p.Layers || e.Plan.Layers[p.Layer].FFN != model.MoE {
				return
			}
			moe++
			prefix := model.ExpertPrefix(p.Layer, 0)
			prefix = prefix[:strings.Index(prefix, "block_sparse_moe")]
			wait := time.After(5 * time.Second)
			if !on {
				wait = time.After(200 * time.Millisecond)
			}
			for {
				mu.Lock()
				done := readFor[prefix]
				mu.Unlock()
				if done {
					early++
					return
				}
				select {
				case <-changed:
				case <-wait:
					return
				}
			}
		}
		var c *tensorCounter
		e, c = openCounted(t, cpu.New(cpu.Options{Precision: ops.BF16}), opts)
		c.hook = func(_ context.Context, first string) error {
			mu.Lock()
			readFor[first[:strings.Index(first, "block_sparse_moe")]] = true
			mu.Unlock()
			select {
			case changed <- struct{}{}:
			default:
			}
			return nil
		}
		runOne(t, e, Request{Sequences: randomSequences(54, 3328, 100)})
		if on && (moe == 0 || early != moe) {
			t.Errorf("read-ahead on: the experts of %d of %d MoE layers were read before the layer started, want all", early, moe)
		}
		if !on && early != 0 {
			t.Errorf("read-ahead off: the experts of %d MoE layers were read before the layer started, want none", early)
		}
	}
}
