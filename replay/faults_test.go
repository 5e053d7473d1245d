package replay

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// faultyReader fails reads of tensors whose name contains match while armed, like a shard that
// disappears or errors mid-stream.
type faultyReader struct {
	*checkpoint.Dir
	match string
	armed atomic.Bool
}

var errInjected = errors.New("injected I/O error")

func (f *faultyReader) ReadBatch(ctx context.Context, reqs []checkpoint.ReadRequest) error {
	if f.armed.Load() {
		for _, r := range reqs {
			if strings.Contains(r.Tensor.Name, f.match) {
				return &checkpoint.ReadError{File: r.Tensor.File, Tensor: r.Tensor.Name, Offset: r.Tensor.Offset, Err: errInjected}
			}
		}
	}
	return f.Dir.ReadBatch(ctx, reqs)
}

// TestReadFaultsNameTheTensorAndLeaveTheEngineUsable: a read that fails mid-wave (a layer's weights, a
// routed expert) fails that wave with the file and tensor named, holds nothing, and the next wave runs.
func TestReadFaultsNameTheTensorAndLeaveTheEngineUsable(t *testing.T) {
	plan, d := openSynth(t, "tiny", 1)
	for _, match := range []string{"layers.5.self_attn.q_proj.weight", "layers.2.block_sparse_moe.experts."} {
		t.Run(match, func(t *testing.T) {
			fr := &faultyReader{Dir: d, match: match}
			e, err := NewEngine(context.Background(), plan, fr, cpu.New(cpu.Options{Precision: ops.BF16}), EngineOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			req := []Request{{Sequences: randomSequences(2, 3328, 20)}}
			fr.armed.Store(true)
			_, _, err = e.Run(context.Background(), req)
			if !errors.Is(err, errInjected) {
				t.Fatalf("Run = %v, want the injected error", err)
			}
			for _, want := range []string{match, ".safetensors"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
			if e.HeldBytes() != 0 {
				t.Errorf("after the failed wave %d bytes are still held", e.HeldBytes())
			}
			fr.armed.Store(false)
			if _, _, err := e.Run(context.Background(), req); err != nil {
				t.Errorf("the engine is not usable after a failed wave: %v", err)
			}
		})
	}
}

// TestCancelledWave: cancelling the context stops a wave between layers with the context's error.
func TestCancelledWave(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	e := openTiny(t, ops.BF16, EngineOptions{Progress: func(p Progress) {
		if p.Layer == 2 {
			cancel()
		}
	}})
	_, _, err := e.Run(ctx, []Request{{Sequences: randomSequences(3, 3328, 30)}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if e.HeldBytes() != 0 {
		t.Errorf("after the cancelled wave %d bytes are still held", e.HeldBytes())
	}
	e.SetProgress(nil)
	if _, _, err := e.Run(context.Background(), []Request{{Sequences: randomSequences(3, 3328, 30)}}); err != nil {
		t.Errorf("the engine is not usable after a cancelled wave: %v", err)
	}
}

// TestBadRequests: each malformed request is refused with a message naming what is wrong.
func TestBadRequests(t *testing.T) {
	e := openTiny(t, ops.BF16, EngineOptions{})
	ok := randomSequences(4, 3328, 5)[0]
	tests := []struct {
		name string
		req  Request
		want string
	}{
		{"no sequences", Request{}, "no sequences"},
		{"empty sequence", Request{Sequences: []Sequence{{}}}, "sequence 0 is empty"},
		{"id out of range", Request{Sequences: []Sequence{{Tokens: []int32{1, 3328}}}}, "token id 3328 outside the vocabulary"},
		{"negative id", Request{Sequences: []Sequence{ok, {Tokens: []int32{-1}}}}, "sequence 1 position 0: token id -1"},
		{"top-k too large", Request{Sequences: []Sequence{ok}, Options: Options{TopK: 4000}}, "top_k 4000"},
		{"unknown lens layer", Request{Sequences: []Sequence{ok}, Options: Options{Lens: []int{8}}}, "lens: layer 8 outside 0..7"},
		{"repeated lens layer", Request{Sequences: []Sequence{ok}, Options: Options{Lens: []int{1, 3, 1}}}, "lens: layer 1 appears twice"},
		{"unknown hidden layer", Request{Sequences: []Sequence{ok}, Options: Options{Hidden: []int{-1}}}, "hidden: layer -1"},
		{"pieces mismatch", Request{Sequences: []Sequence{{Tokens: ok.Tokens, Pieces: []string{"a"}}}}, "1 pieces for 5 tokens"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := e.Run(context.Background(), []Request{tc.req})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	lim := Limits{MaxTokens: 4, MaxSequence: 1}
	if err := (&Request{Sequences: []Sequence{ok}}).Validate(3328, 8, lim); err == nil || !strings.Contains(err.Error(), "limit is 4") {
		t.Errorf("MaxTokens: %v", err)
	}
	if err := (&Request{Sequences: []Sequence{{Tokens: []int32{1}}, {Tokens: []int32{1}}}}).Validate(3328, 8, lim); err == nil || !strings.Contains(err.Error(), "limit is 1") {
		t.Errorf("MaxSequence: %v", err)
	}
}

// TestETACountsReadout: the progress after the last layer still gives time left (the final readout, counted
// as one more layer at the mean time per layer), never 0 s while the readout runs.
func TestETACountsReadout(t *testing.T) {
	var last Progress
	e := openTiny(t, ops.BF16, EngineOptions{Progress: func(p Progress) { last = p }})
	if _, _, err := e.Run(context.Background(), []Request{{Sequences: randomSequences(3, 3328, 30)}}); err != nil {
		t.Fatal(err)
	}
	if last.Layer != last.Layers || last.Layers == 0 {
		t.Fatalf("last progress %+v: want the last layer", last)
	}
	if want := last.Seconds / float64(last.Layers); last.ETASeconds < want*0.999 || last.ETASeconds > want*1.001 {
		t.Errorf("ETA after the last layer %.6fs, want the mean layer time %.6fs (the readout to come)", last.ETASeconds, want)
	}
}
