package replay

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// liveBytes counts the bytes of the objects a test backend made and has not freed, and their peak (plus
// extra(), when set, at each addition).
type liveBytes struct {
	mu         sync.Mutex
	live       map[any]int64
	held, peak int64
	extra      func() int64
}

func (l *liveBytes) add(key any, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.live == nil {
		l.live = map[any]int64{}
	}
	l.live[key] = n
	l.held += n
	total := l.held
	if l.extra != nil {
		total += l.extra()
	}
	l.peak = max(l.peak, total)
}

// drop forgets key's bytes (a Free).
func (l *liveBytes) drop(key any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n, ok := l.live[key]; ok {
		l.held -= n
		delete(l.live, key)
	}
}

// reset starts the count again from nothing.
func (l *liveBytes) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held, l.peak = 0, 0
	clear(l.live)
}

// accountingBackend counts the weight bytes a backend holds: uploads add, Free subtracts. Together with
// the engine's read-ahead counter (extra) it measures how many layers of weights are held at once.
type accountingBackend struct {
	ops.Backend
	liveBytes
}

func (a *accountingBackend) Upload(dt ops.DType, rows, cols int, raw []byte) (ops.Tensor, error) {
	t, err := a.Backend.Upload(dt, rows, cols, raw)
	if err == nil {
		a.add(t, int64(len(raw)))
	}
	return t, err
}

func (a *accountingBackend) UploadExpert(id, latent, ffn int, w1p, w1s, w3p, w3s, w2p, w2s []byte) (ops.Expert, error) {
	x, err := a.Backend.UploadExpert(id, latent, ffn, w1p, w1s, w3p, w3s, w2p, w2s)
	if err == nil {
		a.add(x, int64(len(w1p)+len(w1s)+len(w3p)+len(w3s)+len(w2p)+len(w2s)))
	}
	return x, err
}

func (a *accountingBackend) Free(t any) {
	a.drop(t)
	a.Backend.Free(t)
}

// TestAtMostTwoLayersHeld: while a wave runs, the weights held (uploaded to the backend plus read ahead in
// host memory, not counting the resident globals) never exceed two layers' worth.
func TestAtMostTwoLayersHeld(t *testing.T) {
	acc := &accountingBackend{Backend: cpu.New(cpu.Options{Precision: ops.BF16})}
	e := openPreset(t, "tiny", 1, acc, EngineOptions{})
	acc.mu.Lock()
	globals := acc.held
	acc.extra, acc.peak = e.HeldBytes, 0
	acc.held = 0 // count layer weights only
	for k := range acc.live {
		delete(acc.live, k)
	}
	acc.mu.Unlock()

	if _, _, err := e.Run(context.Background(), []Request{{Sequences: randomSequences(8, 3328, 64, 64, 64)}}); err != nil {
		t.Fatal(err)
	}
	var largest int64
	for i := range e.Plan.Layers {
		own, experts := e.Plan.LayerBytes(i)
		largest = max(largest, own+experts)
	}
	t.Logf("globals %d bytes resident; peak of layer weights held %d bytes; largest layer %d bytes", globals, acc.peak, largest)
	if acc.peak > 2*largest {
		t.Errorf("peak weights held %d bytes > two layers (%d)", acc.peak, 2*largest)
	}
	if acc.peak < largest/2 {
		t.Errorf("peak weights held %d bytes: the accounting missed the layers (largest %d)", acc.peak, largest)
	}
	if acc.held != 0 || e.HeldBytes() != 0 {
		t.Errorf("after the wave: %d bytes still uploaded, %d read ahead; want 0 (a leak)", acc.held, e.HeldBytes())
	}
}

// limitedBackend is a CPU backend that claims a small element limit, as the CUDA backend has one (2^34).
type limitedBackend struct{ ops.Backend }

func (limitedBackend) MaxElements() int64 { return 40 * 256 }

// TestElementLimitBoundsWaves: on a backend with an element limit the engine splits waves so that no
// activation passes it (tiny's widest activation is 256 columns: 40 tokens a wave), with the results
// of one wave.
func TestElementLimitBoundsWaves(t *testing.T) {
	e := openPreset(t, "tiny", 1, limitedBackend{cpu.New(cpu.Options{Precision: ops.BF16})}, EngineOptions{})
	if w := e.Plan.WidestActivation(); w != 256 {
		t.Fatalf("tiny's widest activation: %d columns, want 256 (the test's limit assumes it)", w)
	}
	req := Request{Sequences: randomSequences(21, 3328, 30, 30, 20), Options: Options{TopK: 2}}
	got := runOne(t, e, req)
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), req)
	if !reflect.DeepEqual(got, want) {
		t.Error("results under the element limit differ from one wave")
	}
	if _, _, err := e.Run(context.Background(), []Request{{Sequences: randomSequences(22, 3328, 41)}}); err == nil || !strings.Contains(err.Error(), "a sequence of 41 tokens is more than the 40 rows") {
		t.Errorf("a sequence past the limit: %v", err)
	}
}

// limitedSlicer is limitedBackend with the CPU backend's ops.Slicer.
type limitedSlicer struct{ *cpu.Backend }

func (limitedSlicer) MaxElements() int64 { return 40 * 256 }

// TestElementLimitBoundsSlices: on a backend that slices layers the element limit bounds a slice, not the
// wave: the same requests run in one read (a sequence past the limit too), with the results of one wave.
func TestElementLimitBoundsSlices(t *testing.T) {
	var plans []string
	e := openPreset(t, "tiny", 1, limitedSlicer{cpu.New(cpu.Options{Precision: ops.BF16})}, EngineOptions{Log: func(s string) { plans = append(plans, s) }})
	req := Request{Sequences: randomSequences(21, 3328, 30, 30, 20, 41), Options: Options{TopK: 2}}
	got := runOne(t, e, req)
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), req)
	if !reflect.DeepEqual(got, want) {
		t.Error("results under the element limit differ from one wave")
	}
	// 121 tokens, at most 40 a slice: four slices, evened out to 31 (evenSlices)
	if len(plans) != 1 || !strings.Contains(plans[0], "in 1 read: 4 slices of 31") {
		t.Errorf("plans %q: want one read in four slices of 31", plans)
	}
}
