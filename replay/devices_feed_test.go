package replay

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// The feed of a wave over devices (feed.go) under faults, shared host buffers and random interleavings.

// TestDevicesFaults: a read that fails mid-wave (a layer's weights, a routed expert) fails the wave over
// devices with the tensor named, leaves nothing held on any device or in the feed's buffers, and the next
// wave runs with the bits of one device; a cancelled wave stops every device.
func TestDevicesFaults(t *testing.T) {
	plan, d := openSynth(t, "tiny", 1)
	req := []Request{{Sequences: randomSequences(2, 3328, 20, 90, 45)}}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), req...)
	for _, match := range []string{"layers.5.self_attn.q_proj.weight", "layers.2.block_sparse_moe.experts."} {
		t.Run(match, func(t *testing.T) {
			fr := &faultyReader{Dir: d, match: match}
			e, bs := openDevicesEngine(t, plan, fr, 3, ops.BF16, EngineOptions{ExpertChunk: 2})
			defer e.Close()
			globals := bs[0].held
			fr.armed.Store(true)
			_, _, err := e.Run(context.Background(), req)
			if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), match) {
				t.Fatalf("err %v; want the injected error naming %s", err, match)
			}
			for k, b := range bs {
				if b.held != globals {
					t.Errorf("after the failed wave device %d holds %d bytes; want the globals' %d", k, b.held, globals)
				}
			}
			fr.armed.Store(false)
			got, _, err := e.Run(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Error("the wave after the fault differs from one device's")
			}
		})
	}
	t.Run("cancelled", func(t *testing.T) {
		e, bs := openDevicesEngine(t, plan, d, 2, ops.BF16, EngineOptions{})
		defer e.Close()
		globals := bs[0].held
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		layers := 0
		e.SetProgress(func(p Progress) {
			layers = p.Layer
			if p.Layer == 3 {
				cancel()
			}
		})
		_, _, err := e.Run(ctx, req)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v; want context.Canceled", err)
		}
		if layers != 3 {
			t.Errorf("progress reached layer %d; want 3, where the wave was cancelled", layers)
		}
		for k, b := range bs {
			if b.held != globals {
				t.Errorf("after the cancelled wave device %d holds %d bytes; want the globals' %d", k, b.held, globals)
			}
		}
	})
}

// adoptingBackend is a pinnedBackend that can adopt another's host buffers (as the CUDA backend's
// AdoptHost): it then counts uploads from them as from its own host memory.
type adoptingBackend struct {
	*pinnedBackend
	adopted map[uintptr]bool
}

func (a *adoptingBackend) AdoptHost(buf []byte) error {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	a.mu.Lock()
	defer a.mu.Unlock()
	a.live[p], a.adopted[p] = len(buf), true
	return nil
}

func (a *adoptingBackend) ForgetHost(buf []byte) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.adopted[p] {
		delete(a.live, p)
		delete(a.adopted, p)
	}
}

// TestDevicesShareHostBuffers: over devices whose backends have host memory, the feed reads into device
// 0's buffers and the other devices adopt them, so every device uploads every routed expert straight from
// the buffer the checkpoint was read into (no staging copy); with the host cache too; results are one
// device's bits, and after Close no buffer is live or adopted on any device.
func TestDevicesShareHostBuffers(t *testing.T) {
	plan, d := openSynth(t, "tiny", 1)
	req := []Request{{Sequences: randomSequences(4, 3328, 50, 70, 30, 90), Options: Options{TopK: 3, Lens: []int{6}}}}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), req...)
	for _, cache := range []int64{0, 1 << 30} {
		first := newPinnedBackend()
		others := []*adoptingBackend{{newPinnedBackend(), map[uintptr]bool{}}, {newPinnedBackend(), map[uintptr]bool{}}}
		eo := EngineOptions{HostCacheBytes: cache, ExpertChunk: 3}
		for _, o := range others {
			eo.Devices = append(eo.Devices, o)
		}
		e, err := NewEngine(context.Background(), plan, d, first, eo)
		if err != nil {
			t.Fatal(err)
		}
		for wave := range 2 {
			got, _, err := e.Run(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("cache %d, wave %d: results over devices sharing host buffers differ from one device's", cache, wave)
			}
		}
		for k, o := range others {
			o.mu.Lock()
			in, all := o.expertsIn, o.hostMemBackend.experts
			o.mu.Unlock()
			if all == 0 || in != all {
				t.Errorf("cache %d: device %d uploaded %d of %d experts from shared host buffers; want all", cache, k+1, in, all)
			}
		}
		e.Close()
		if n := len(first.live); n != 0 {
			t.Errorf("cache %d: after Close device 0 has %d host buffers live", cache, n)
		}
		for k, o := range others {
			if len(o.live) != 0 || len(o.adopted) != 0 {
				t.Errorf("cache %d: after Close device %d has %d buffers live, %d adopted", cache, k+1, len(o.live), len(o.adopted))
			}
		}
	}
}

// jitterReader delays every read by a random 0-3 ms, so that the devices' passes interleave differently
// from run to run.
type jitterReader struct {
	*checkpoint.Dir
	mu sync.Mutex
	r  *rand.Rand
}

func (j *jitterReader) ReadBatch(ctx context.Context, reqs []checkpoint.ReadRequest) error {
	j.mu.Lock()
	d := time.Duration(j.r.IntN(3000)) * time.Microsecond
	j.mu.Unlock()
	time.Sleep(d)
	return j.Dir.ReadBatch(ctx, reqs)
}

// TestDevicesInterleavings: with reads of random delays, four devices, one expert a chunk and small
// slices (many expert calls, each device waiting on experts another claimed), every wave ends (a wait
// that never ended would fail the wave at the deadline) with one device's bits, and every device is left
// holding only its globals.
func TestDevicesInterleavings(t *testing.T) {
	plan, d := openSynth(t, "tiny", 1)
	req := []Request{{Sequences: randomSequences(8, 3328, 40, 7, 33, 64, 20, 50), Options: Options{TopK: 2}}}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), req...)
	for i, eo := range []EngineOptions{{ExpertChunk: 1}, {ExpertChunk: 2, SliceTokens: 16}, {SliceTokens: 8}} {
		jr := &jitterReader{Dir: d, r: rand.New(rand.NewPCG(uint64(i), 3))}
		e, bs := openDevicesEngine(t, plan, jr, 4, ops.BF16, eo)
		globals := bs[0].held
		for wave := range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			got, _, err := e.Run(ctx, req)
			cancel()
			if err != nil {
				t.Fatalf("options %+v, wave %d: %v", eo, wave, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("options %+v, wave %d: results differ from one device's", eo, wave)
			}
		}
		for k, b := range bs {
			if b.held != globals {
				t.Errorf("options %+v: device %d holds %d bytes between waves; want the globals' %d", eo, k, b.held, globals)
			}
		}
		e.Close()
	}
}

// slowBackend is a deviceBackend whose matmuls take 3 ms longer, and which samples the weights
// the engine holds in host memory (HeldBytes, peak) while it computes.
type slowBackend struct {
	*deviceBackend
	e    *Engine
	peak int64
}

func (s *slowBackend) MatMul(x, w ops.Tensor) (ops.Tensor, error) {
	time.Sleep(3 * time.Millisecond)
	if s.e != nil {
		s.peak = max(s.peak, s.e.HeldBytes())
	}
	return s.deviceBackend.MatMul(x, w)
}

// TestDevicesWindow: a device with a far smaller share (one token beside hundreds, on a slower device)
// does not run ahead of the other by more than the window: the weights the feed holds in host memory stay
// within window+1 layers' worth, not the whole model's.
func TestDevicesWindow(t *testing.T) {
	plan, d := openSynth(t, "tiny", 1)
	var total, largest int64
	for i := range plan.Layers {
		o, x := plan.LayerBytes(i)
		total += o + x
		largest = max(largest, o+x)
	}
	fast := &deviceBackend{Backend: cpu.New(cpu.Options{Precision: ops.BF16})}
	slow := &slowBackend{deviceBackend: &deviceBackend{Backend: cpu.New(cpu.Options{Precision: ops.BF16})}}
	// device 0 gets the long sequence (spread: longest first, to the lowest index) and is the slow one
	e, err := NewEngine(context.Background(), plan, d, slow, EngineOptions{Devices: []ops.Backend{fast}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	slow.e = e
	req := []Request{{Sequences: randomSequences(3, 3328, 300, 1)}}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), req...)
	got := runOne(t, e, req...)
	if !reflect.DeepEqual(got, want) {
		t.Error("results differ from one device's")
	}
	t.Logf("weights held in host memory: peak %d bytes; the model's layers %d bytes, the largest %d", slow.peak, total, largest)
	if slow.peak > 3*largest { // window+1 layers
		t.Errorf("the feed held up to %d bytes of weights; want at most %d layers' worth (%d bytes a layer), not the model's %d",
			slow.peak, window+1, largest, total)
	}
	if e.HeldBytes() != 0 {
		t.Errorf("%d bytes held after the wave", e.HeldBytes())
	}
}
