package replay

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// fakeHost is host memory that counts its buffers (ops.HostMemory), refusing past limit allocations.
type fakeHost struct {
	live         map[*byte]int
	allocs, fail int
}

func (h *fakeHost) AllocHost(n int) ([]byte, error) {
	if h.fail > 0 && h.allocs >= h.fail {
		return nil, fmt.Errorf("no page-locked memory left")
	}
	h.allocs++
	b := make([]byte, n)
	if h.live == nil {
		h.live = map[*byte]int{}
	}
	h.live[&b[0]] = n
	return b, nil
}

func (h *fakeHost) FreeHost(b []byte) error {
	if _, ok := h.live[&b[0]]; !ok {
		return fmt.Errorf("not a buffer of AllocHost")
	}
	delete(h.live, &b[0])
	return nil
}

// TestStateBufs: a wave takes the last one's buffers of the sizes it asks for, the first new size
// releases the buffers this wave has not touched, a failed pin falls back to the heap, and close frees
// every pinned buffer.
func TestStateBufs(t *testing.T) {
	h := &fakeHost{}
	s := &stateBufs{mem: h, idle: map[int][][]uint16{}, used: map[*uint16]bool{}, raw: map[*uint16][]byte{}}
	s.begin()
	a, b := s.Get(100), s.Get(50)
	s.Put(a)
	s.Put(b)
	if h.allocs != 2 || s.bytes() != 300 {
		t.Fatalf("first wave: %d allocations, %d bytes held", h.allocs, s.bytes())
	}
	s.begin() // a wave asking for 100 only
	if a2 := s.Get(100); &a2[0] != &a[0] || h.allocs != 2 {
		t.Errorf("the second wave's buffer of 100 is not the first's (%d allocations)", h.allocs)
	} else {
		s.Put(a2)
	}
	if len(h.live) != 2 {
		t.Errorf("an untouched buffer released before any new size: %d live", len(h.live))
	}
	c := s.Get(70) // a new size: the buffer of 50, untouched this wave, goes
	if len(h.live) != 2 || s.bytes() != 340 {
		t.Errorf("after a new size: %d pinned buffers live, %d bytes held; want the 100 and the 70", len(h.live), s.bytes())
	}
	s.Put(c)
	h.fail = h.allocs // pinning fails from now on: the heap instead
	d := s.Get(33)
	if len(d) != 33 || len(h.live) != 2 {
		t.Errorf("a failed pin: buffer of %d, %d pinned live", len(d), len(h.live))
	}
	s.Put(d)
	s.close()
	if len(h.live) != 0 || s.bytes() != 0 {
		t.Errorf("after close: %d pinned buffers live, %d bytes held", len(h.live), s.bytes())
	}
}

// TestStateBufsAcrossWaves: PinHostBuffers allocates exactly the host buffers a wave with its state in
// host memory takes; the wave gives every one back, and the next wave of the same shape reuses them all,
// with the same bits; expert-major stashes too.
func TestStateBufsAcrossWaves(t *testing.T) {
	seqs := randomSequences(9, 3328, sliceSeqLens...)
	req := Request{Sequences: seqs, Options: Options{TopK: 3, Lens: []int{4}}}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), req)
	for _, major := range []bool{false, true} {
		e := openTiny(t, ops.BF16, EngineOptions{SliceTokens: 128, ExpertChunk: 2})
		e.forceExpertMajor = major
		e.opts.DeviceMemory = slicedDeviceFor(t, e, 128) // state of most slices in host memory
		pinned, err := e.PinHostBuffers(sliceSeqLens)
		if err != nil || pinned == 0 {
			t.Fatalf("expert-major %v: PinHostBuffers: %d bytes, %v", major, pinned, err)
		}
		pinned -= int64(e.slab.n) * e.aheadSlotBytes() // the read-ahead's slots; the rest is the state's
		made := e.state.made
		var held int64
		for wave := range 2 {
			got, _, err := e.Run(context.Background(), []Request{req})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("expert-major %v, wave %d: results differ from the unsliced wave", major, wave)
			}
			if !e.plan.HostState {
				t.Fatalf("plan %s: want state in host memory", e.plan)
			}
			var idle int64
			for _, l := range e.state.idle {
				for _, b := range l {
					idle += 2 * int64(len(b))
				}
			}
			if idle != e.state.bytes() {
				t.Errorf("expert-major %v, wave %d: %d bytes of host buffers idle of %d held: some not given back", major, wave, idle, e.state.bytes())
			}
			if e.state.made != made {
				t.Errorf("expert-major %v, wave %d: %d host buffers allocated during the wave, after PinHostBuffers", major, wave, e.state.made-made)
			}
			if wave == 0 {
				held = e.state.bytes()
				if held != pinned {
					t.Errorf("expert-major %v: %d bytes of host buffers held, %d pinned before the wave", major, held, pinned)
				}
				if held == 0 {
					t.Fatalf("expert-major %v: no state in host buffers", major)
				}
			} else if b := e.state.bytes(); b != held {
				t.Errorf("expert-major %v: the second wave holds %d bytes of host buffers, the first %d", major, b, held)
			}
		}
	}
}

// TestStateBufsAfterCancel: a wave with its state in host memory cancelled in the middle of its layers
// (expert-major too) gives every host buffer back, and the next wave has the unsliced bits.
func TestStateBufsAfterCancel(t *testing.T) {
	seqs := randomSequences(9, 3328, sliceSeqLens...)
	req := Request{Sequences: seqs, Options: Options{TopK: 3}}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), req)
	for _, major := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		opts := EngineOptions{SliceTokens: 128, ExpertChunk: 2, Progress: func(p Progress) {
			if p.Layer == 3 {
				cancel()
			}
		}}
		e := openTiny(t, ops.BF16, opts)
		e.forceExpertMajor = major
		e.opts.DeviceMemory = slicedDeviceFor(t, e, 128)
		if _, _, err := e.Run(ctx, []Request{req}); !errors.Is(err, context.Canceled) {
			t.Fatalf("expert-major %v: a wave cancelled at layer 3: -want context.Canceled +got %v", major, err)
		}
		var idle int64
		for _, l := range e.state.idle {
			for _, b := range l {
				idle += 2 * int64(len(b))
			}
		}
		if idle != e.state.bytes() || idle == 0 {
			t.Errorf("expert-major %v: after the cancel %d bytes of host buffers idle of %d held", major, idle, e.state.bytes())
		}
		e.opts.Progress = nil
		if got := runOne(t, e, req); !reflect.DeepEqual(got, want) {
			t.Errorf("expert-major %v: the wave after a cancel differs from the unsliced one", major)
		}
	}
}

// TestHostAllocBytes: a wave reports the host buffers it allocated: the first wave of an engine its
// arenas (and, with the state in host memory, its state buffers), a second wave of the same shape none,
// since the engine keeps them.
func TestHostAllocBytes(t *testing.T) {
	seqs := randomSequences(9, 3328, sliceSeqLens...)
	req := Request{Sequences: seqs, Options: Options{TopK: 3}}
	for _, host := range []bool{false, true} {
		e := openTiny(t, ops.BF16, EngineOptions{SliceTokens: 128, ExpertChunk: 2})
		if host {
			e.opts.DeviceMemory = slicedDeviceFor(t, e, 128) // state of most slices in host memory
		}
		var got [2]int64
		for wave := range 2 {
			state := e.state.allocatedBytes()
			_, st, err := e.Run(context.Background(), []Request{req})
			if err != nil {
				t.Fatal(err)
			}
			got[wave] = st.HostAllocBytes
			if made := e.state.allocatedBytes() - state; host && wave == 0 && made == 0 {
				t.Fatalf("plan %s: no state buffers allocated in the first wave", e.plan)
			} else if st.HostAllocBytes < made {
				t.Errorf("wave %d: %d bytes of host buffers reported, %d of them state buffers", wave, st.HostAllocBytes, made)
			}
		}
		if got[0] <= 0 || got[1] != 0 {
			t.Errorf("state in host memory %v: host buffers allocated %d bytes in the first wave, %d in the second: want > 0, then 0", host, got[0], got[1])
		}
	}
}
