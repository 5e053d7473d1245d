package replay

import (
	"context"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// openTiny opens the tiny preset on a CPU backend.
func openTiny(t testing.TB, prec ops.Precision, opts EngineOptions) *Engine {
	t.Helper()
	return openPreset(t, "tiny", 1, cpu.New(cpu.Options{Precision: prec}), opts)
}

func openPreset(t testing.TB, preset string, seed uint64, b ops.Backend, opts EngineOptions) *Engine {
	t.Helper()
	e, d, err := Open(context.Background(), synthModel(t, preset, seed), b, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(); d.Close() })
	return e
}

// randomSequences draws sequences of the given lengths from the BPE part of the vocabulary.
func randomSequences(seed uint64, vocab int, lengths ...int) []Sequence {
	r := rand.New(rand.NewPCG(seed, 7))
	out := make([]Sequence, len(lengths))
	for i, n := range lengths {
		s := make([]int32, n)
		for j := range s {
			s[j] = int32(r.IntN(vocab - 256))
		}
		out[i] = Sequence{Tokens: s}
	}
	return out
}

func runOne(t testing.TB, e *Engine, reqs ...Request) [][]Result {
	t.Helper()
	res, _, err := e.Run(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestBatchInvariance: every sequence's results are bit-identical replayed alone and inside a wave with
// others, for every expert chunking.
func TestBatchInvariance(t *testing.T) {
	seqs := randomSequences(3, 3328, 1, 17, 64, 65, 5)
	opts := Options{TopK: 5, Hidden: []int{0, 4, 7}, Lens: []int{2, 7}, Router: true, AttnRes: true}
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		alone := openTiny(t, prec, EngineOptions{})
		var want []Result
		for _, s := range seqs {
			want = append(want, runOne(t, alone, Request{Sequences: []Sequence{s}, Options: opts})[0][0])
		}
		for _, chunk := range []int{0, 1, 3} {
			e := openTiny(t, prec, EngineOptions{ExpertChunk: chunk})
			// the same sequences split over two requests in one wave, in another order
			got := runOne(t, e,
				Request{Sequences: []Sequence{seqs[3], seqs[0], seqs[4]}, Options: opts},
				Request{Sequences: []Sequence{seqs[2], seqs[1]}, Options: opts})
			order := []struct{ req, seq, want int }{{0, 0, 3}, {0, 1, 0}, {0, 2, 4}, {1, 0, 2}, {1, 1, 1}}
			for _, o := range order {
				g, w := got[o.req][o.seq], want[o.want]
				g.SeqID, w.SeqID = 0, 0
				if !reflect.DeepEqual(g, w) {
					t.Errorf("%s, expert chunk %d: sequence %d (len %d) differs in a wave from alone",
						prec, chunk, o.want, len(w.Tokens))
				}
			}
		}
	}
}

// TestOptionsDoNotLeak: a request gets what it asked for and nothing another request in the same wave
// asked for (lens readouts add output mixes; hidden, router and top-k are per request).
func TestOptionsDoNotLeak(t *testing.T) {
	seqs := randomSequences(12, 3328, 20, 9)
	a := Request{Sequences: seqs[:1], Options: Options{TopK: 2, AttnRes: true}}
	b := Request{Sequences: seqs[1:], Options: Options{TopK: 6, Lens: []int{1, 4}, Hidden: []int{3}, Router: true}}
	e := openTiny(t, ops.BF16, EngineOptions{})
	aloneA, aloneB := runOne(t, e, a)[0], runOne(t, e, b)[0]
	both := runOne(t, e, a, b)
	if !reflect.DeepEqual(both[0], aloneA) {
		t.Errorf("request a differs when it shares a wave with b (mixes %d vs %d alone)", len(both[0][0].Mixes), len(aloneA[0].Mixes))
	}
	if !reflect.DeepEqual(both[1], aloneB) {
		t.Error("request b differs when it shares a wave with a")
	}
}

// TestSplitWaves: a request larger than MaxWaveTokens runs as several waves with results identical to one
// wave, and a sequence larger than the bound is refused with the bound named.
func TestSplitWaves(t *testing.T) {
	seqs := randomSequences(9, 3328, 30, 10, 25, 40)
	opts := Options{TopK: 3, Hidden: []int{2}, Router: true}
	reqs := []Request{{Sequences: seqs[:2], Options: opts}, {Sequences: seqs[2:], Options: opts}}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), reqs...)
	split := openTiny(t, ops.BF16, EngineOptions{MaxWaveTokens: 45})
	got, st, err := split.Run(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Error("results of a request split over waves differ from one wave")
	}
	if st.Tokens != 105 || st.Sequences != 4 {
		t.Errorf("stats cover %d tokens, %d sequences; want 105, 4", st.Tokens, st.Sequences)
	}
	_, _, err = openTiny(t, ops.BF16, EngineOptions{MaxWaveTokens: 35}).Run(context.Background(), reqs)
	if err == nil || !strings.Contains(err.Error(), "sequence 1 has 40 tokens, more than the 35") {
		t.Errorf("a sequence over the bound: %v", err)
	}
}

// TestLensLastLayerIsOutput: the lens at the last layer equals the model's own output bit for bit.
func TestLensLastLayerIsOutput(t *testing.T) {
	e := openTiny(t, ops.BF16, EngineOptions{})
	last := len(e.Plan.Layers) - 1
	res := runOne(t, e, Request{Sequences: randomSequences(4, 3328, 33, 9), Options: Options{TopK: 8, Lens: []int{1, last}}})
	for _, r := range res[0] {
		lens := r.Lens[1]
		if lens.Layer != last {
			t.Fatalf("lens layer %d, want %d", lens.Layer, last)
		}
		if !reflect.DeepEqual(lens.Stats, r.Stats) {
			t.Errorf("sequence %d: lens at layer %d differs from the output", r.SeqID, last)
		}
		if reflect.DeepEqual(r.Lens[0].Stats, r.Stats) {
			t.Errorf("sequence %d: lens at layer 1 equals the output: the lens does not read the layer", r.SeqID)
		}
	}
}

// TestExpertBytesFollowTheWave: only chosen experts are read, so a wave of one short sequence reads fewer
// expert bytes than a wave of many.
func TestExpertBytesFollowTheWave(t *testing.T) {
	e := openTiny(t, ops.BF16, EngineOptions{})
	_, short, err := e.Run(context.Background(), []Request{{Sequences: randomSequences(5, 3328, 2)}})
	if err != nil {
		t.Fatal(err)
	}
	_, long, err := e.Run(context.Background(), []Request{{Sequences: randomSequences(6, 3328, 64, 64, 64, 64)}})
	if err != nil {
		t.Fatal(err)
	}
	var sb, lb int64
	for i := range short.ExpertBytes {
		sb += short.ExpertBytes[i]
		lb += long.ExpertBytes[i]
		if e.Plan.Layers[i].FFN == 0 && (short.ExpertsRead[i] != 0 || long.ExpertsRead[i] != 0) {
			t.Errorf("layer %d is dense but read experts", i)
		}
	}
	t.Logf("expert bytes: 2-token wave %d (%v experts), 256-token wave %d (%v experts)", sb, short.ExpertsRead, lb, long.ExpertsRead)
	if !(sb < lb) {
		t.Errorf("expert bytes: short wave %d, long wave %d: want fewer for the short wave", sb, lb)
	}
	own, experts := e.Plan.LayerBytes(1)
	if short.LayerBytes[1] != own {
		t.Errorf("layer 1: read %d non-expert bytes, want %d", short.LayerBytes[1], own)
	}
	perExpert := experts / int64(e.Plan.Config.NumExperts)
	if short.ExpertBytes[1] != int64(short.ExpertsRead[1])*perExpert {
		t.Errorf("layer 1: %d expert bytes for %d experts of %d bytes", short.ExpertBytes[1], short.ExpertsRead[1], perExpert)
	}
	if k := e.Plan.Config.NumExpertsPerToken; short.ExpertsRead[1] < k || short.ExpertsRead[1] > 2*k {
		t.Errorf("layer 1: 2 tokens read %d experts, want %d..%d", short.ExpertsRead[1], k, 2*k)
	}
}
