package replay

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"unsafe"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// hostMemBackend is the CPU backend with an ops.HostMemory that records its buffers, scribbles over a
// buffer when it is freed (a use after FreeHost then shows in the results), and counts uploads whose
// bytes came from its buffers.
type hostMemBackend struct {
	ops.Backend
	mu        sync.Mutex
	live      map[uintptr]int
	allocs    int
	fromHost  int // Upload and UploadExpert calls whose bytes all lay in live buffers
	expertsIn int // of those, UploadExpert calls
	experts   int // all UploadExpert calls
}

func newHostMemBackend(prec ops.Precision) *hostMemBackend {
	return &hostMemBackend{Backend: cpu.New(cpu.Options{Precision: prec}), live: map[uintptr]int{}}
}

func (h *hostMemBackend) AllocHost(n int) ([]byte, error) {
	b := make([]byte, n)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live[uintptr(unsafe.Pointer(&b[0]))] = n
	h.allocs++
	return b, nil
}

func (h *hostMemBackend) FreeHost(b []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if _, ok := h.live[p]; !ok {
		return errors.New("FreeHost: not a live buffer")
	}
	delete(h.live, p)
	for i := range b {
		b[i] = 0xff
	}
	return nil
}

// inHost reports whether every slice lies inside one live buffer.
func (h *hostMemBackend) inHost(bs ...[]byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, b := range bs {
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		found := false
		for p, n := range h.live {
			if lo >= p && lo+uintptr(len(b)) <= p+uintptr(n) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func (h *hostMemBackend) Upload(dt ops.DType, rows, cols int, raw []byte) (ops.Tensor, error) {
	if h.inHost(raw) {
		h.mu.Lock()
		h.fromHost++
		h.mu.Unlock()
	}
	t, err := h.Backend.Upload(dt, rows, cols, raw)
	for i := range raw { // the engine may reuse the bytes at once: a backend must not keep them
		raw[i] ^= 0x5a
	}
	return t, err
}

func (h *hostMemBackend) UploadExpert(id, latent, ffn int, w1p, w1s, w3p, w3s, w2p, w2s []byte) (ops.Expert, error) {
	in := h.inHost(w1p, w1s, w3p, w3s, w2p, w2s)
	h.mu.Lock()
	h.experts++
	if in {
		h.fromHost++
		h.expertsIn++
	}
	h.mu.Unlock()
	return h.Backend.UploadExpert(id, latent, ffn, w1p, w1s, w3p, w3s, w2p, w2s)
}

// TestHostMemoryEngine: on a backend with ops.HostMemory the engine reads the weights into its buffers
// and uploads from them (every expert, and the layers' tensors), the results equal the plain CPU
// backend's bit for bit in every expert chunking, a second wave allocates no new buffer, nothing is held
// after a wave, and Close frees every buffer.
func TestHostMemoryEngine(t *testing.T) {
	seqs := randomSequences(21, 3328, 40, 3, 77)
	opts := Options{TopK: 4, Hidden: []int{1, 6}, Lens: []int{3}, Router: true, AttnRes: true}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), Request{Sequences: seqs, Options: opts})
	for _, chunk := range []int{0, 1, 5} {
		h := newHostMemBackend(ops.BF16)
		e, d, err := Open(context.Background(), synthModel(t, "tiny", 1), h, EngineOptions{ExpertChunk: chunk})
		if err != nil {
			t.Fatal(err)
		}
		if h.allocs == 0 || len(h.live) != 0 {
			t.Errorf("chunk %d: after Open %d buffers allocated, %d live; want some, and none kept (trimmed)", chunk, h.allocs, len(h.live))
		}
		for wave := range 2 {
			got := runOne(t, e, Request{Sequences: seqs, Options: opts})
			if !reflect.DeepEqual(got, want) {
				t.Errorf("chunk %d wave %d: results differ from the CPU backend without host memory", chunk, wave)
			}
			if e.HeldBytes() != 0 {
				t.Errorf("chunk %d wave %d: %d bytes held after the wave", chunk, wave, e.HeldBytes())
			}
		}
		allocs := h.allocs
		runOne(t, e, Request{Sequences: seqs, Options: opts})
		if h.allocs != allocs {
			t.Errorf("chunk %d: a third wave allocated %d new host buffers; want them reused", chunk, h.allocs-allocs)
		}
		if h.experts == 0 || h.expertsIn != h.experts || h.fromHost <= h.experts {
			t.Errorf("chunk %d: %d of %d experts and %d dense tensors uploaded from host memory", chunk, h.expertsIn, h.experts, h.fromHost-h.expertsIn)
		}
		if e.HostBufferBytes() == 0 {
			t.Errorf("chunk %d: HostBufferBytes 0 between waves; want the buffers kept", chunk)
		}
		e.Close()
		d.Close()
		if len(h.live) != 0 || e.HostBufferBytes() != 0 {
			t.Errorf("chunk %d: after Close %d host buffers live (%d bytes counted)", chunk, len(h.live), e.HostBufferBytes())
		}
	}
}

// TestHostPool: smallest fit, reuse, the idle bound and trim.
func TestHostPool(t *testing.T) {
	h := newHostMemBackend(ops.BF16)
	p := newHostPool(h)
	a, err := p.get(10 << 20)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.get(1)
	if len(a) != 10<<20 || len(b) != arenaAlign {
		t.Fatalf("arenas of %d and %d bytes; want %d and %d", len(a), len(b), 10<<20, arenaAlign)
	}
	p.put(a)
	p.put(b[:1])
	if c, _ := p.get(100); &c[0] != &b[0] {
		t.Error("get(100) did not reuse the smallest idle arena that fits")
	} else {
		p.put(c)
	}
	if c, _ := p.get(5 << 20); &c[0] != &a[0] {
		t.Error("get(5 MiB) did not reuse the 10 MiB arena")
	} else {
		p.put(c)
	}
	var extra [][]byte
	for range maxIdle + 2 {
		x, _ := p.get(1 << 20)
		extra = append(extra, x)
	}
	for _, x := range extra {
		p.put(x)
	}
	if len(p.idle) != maxIdle || len(h.live) != maxIdle {
		t.Errorf("%d idle arenas, %d live buffers; want %d", len(p.idle), len(h.live), maxIdle)
	}
	if err := p.trim(); err != nil {
		t.Fatal(err)
	}
	if len(h.live) != 0 || p.bytes() != 0 {
		t.Errorf("after trim: %d live buffers, %d bytes counted", len(h.live), p.bytes())
	}
}
