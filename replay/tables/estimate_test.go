package tables

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/synth"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// liveHeap is the heap's live bytes after two collections (the second empties sync.Pool's victim cache,
// which holds the zstd encoders of an earlier Parquet write).
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// heapPeak samples the heap's object bytes (live and not yet swept) every 20 µs until stop is called,
// and returns the largest sample.
func heapPeak() (stop func() int64) {
	var peak atomic.Int64
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			metrics.Read(s)
			if v := int64(s[0].Value.Uint64()); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Microsecond):
			}
		}
	}()
	return func() int64 {
		close(done)
		<-exited
		return peak.Load()
	}
}

// The estimate is at least the memory a replay's results, tables and writer really hold at their peak,
// and at most twice it: a replay of the tiny model with every lens layer and a top-k of 1024 (the audit's
// request, whose results the old estimate put at a sixth of what they held), routing, mixes and two
// hidden layers, built and written as Parquet (whole, and streamed batch by batch as the service
// does) and as Arrow IPC, and only held. The collector runs at
// GOGC=5 so that the sampled heap is the live bytes plus little garbage.
func TestEstimateCoversMeasured(t *testing.T) {
	if testing.Short() {
		t.Skip("replays the tiny model several times")
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "tiny")
	if _, err := synth.Write(ctx, dir, synth.Options{Preset: "tiny", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	e, d, err := replay.Open(ctx, dir, cpu.New(cpu.Options{Precision: ops.BF16}), replay.EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	defer e.Close()
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]int32, 400)
	for i := range ids {
		ids[i] = int32(rng.IntN(e.Model.Dims.Vocab))
	}
	lens := make([]int, len(e.Plan.Layers))
	for l := range lens {
		lens[l] = l
	}
	opts := replay.Options{TopK: 1024, Lens: lens, Hidden: []int{0, len(lens) - 1}, Router: true, AttnRes: true}
	request := func() replay.Request { // made after the baseline: the estimate counts the sequences too
		return replay.Request{Sequences: []replay.Sequence{replay.FromIDs(tok, ids[:150]), replay.FromIDs(tok, ids[150:])}, Options: opts}
	}
	shape := ShapeOf(e.Plan, tok.Piece)
	out := t.TempDir()
	write := func(res []replay.Result, format string, float16, streamed bool) {
		opts := Options{HiddenFloat16: float16, Piece: tok.Piece}
		ext := map[string]string{FormatParquet: ".parquet", FormatIPC: ".arrow"}[format]
		if streamed { // as the service spills: each table built batch by batch as it is written
			var srcs []TableSource
			for _, name := range Captured(res) {
				rr, err := NewReader(res, name, opts)
				if err != nil {
					t.Fatal(err)
				}
				defer rr.Release()
				srcs = append(srcs, TableSource{Name: name, Reader: rr})
			}
			if _, err := WriteSetFrom(t.Context(), filepath.Join(out, "s"+ext), srcs); err != nil {
				t.Fatal(err)
			}
			return
		}
		set, err := Build(res, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer set.Release()
		if _, err := WriteSet(t.Context(), filepath.Join(out, "r"+ext), set); err != nil {
			t.Fatal(err)
		}
	}
	// A first pass of each kind, so that the engine's buffers and the codec's tables exist before the
	// baseline (they are the process's, not the results').
	res, _, err := e.Run(ctx, []replay.Request{request()})
	if err != nil {
		t.Fatal(err)
	}
	write(res[0], FormatParquet, false, false)
	write(res[0], FormatIPC, false, false)
	res = nil

	defer debug.SetGCPercent(debug.SetGCPercent(5))
	for _, tt := range []struct {
		name              string
		format            string
		float16, streamed bool
	}{
		{"parquet", FormatParquet, false, false},
		{"parquet float16", FormatParquet, true, false},
		{"parquet streamed", FormatParquet, false, true},
		{"arrow", FormatIPC, false, false},
		{"held only", "", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base := liveHeap()
			req := request()
			res, _, err := e.Run(ctx, []replay.Request{req})
			if err != nil {
				t.Fatal(err)
			}
			held := liveHeap() - base
			peak := held
			if tt.format != "" {
				stop := heapPeak()
				write(res[0], tt.format, tt.float16, tt.streamed)
				peak = stop() - base
			}
			runtime.KeepAlive(res)
			est := shape.Estimate(Output{Request: req, Format: tt.format, Float16: tt.float16, Streamed: tt.streamed})
			t.Logf("measured: results %d, peak %d; estimate %d (results %d, tables %d, writing %d)", held, peak, est.Total(), est.Results, est.Tables, est.Transient)
			// The results are counted to the allocation; the engine's own buffers differ by kilobytes
			// between waves, hence the 1%.
			if est.Results < held-held/100 {
				t.Errorf("results: estimate %s, measured %s", numtext.Bytes(est.Results), numtext.Bytes(held))
			}
			if est.Total() < peak || est.Total() > 2*peak {
				t.Errorf("estimate %s, measured peak %s: want between 1 and 2 times it", numtext.Bytes(est.Total()), numtext.Bytes(peak))
			}
		})
	}
}

// A wave counts its results under the union of its requests' options (a request's results keep the
// wave's allocations alive), and each request's tables once.
func TestEstimateWave(t *testing.T) {
	s := Shape{Layers: 8, Hidden: 128, MoELayers: 7, ExpertsPerToken: 4, MixWeights: 4, TopPieceBytes: []int64{0, 9, 17, 24}}
	seq := replay.Sequence{Tokens: make([]int32, 100), Pieces: make([]string, 100)}
	plain := Output{Request: replay.Request{Sequences: []replay.Sequence{seq}}, Format: FormatParquet}
	lens := Output{Request: replay.Request{Sequences: []replay.Sequence{seq}, Options: replay.Options{TopK: 3, Lens: []int{2, 5}}}, Format: FormatParquet}
	a, b, w := s.Estimate(plain), s.Estimate(lens), s.EstimateWave([]Output{plain, lens})
	if want := s.InputBytes(plain.Request) + s.InputBytes(lens.Request) + 200*s.TokenBytes(lens.Request.Options); w.Results != want {
		t.Errorf("wave results %d, want %d (both requests' tokens under the union)", w.Results, want)
	}
	if w.Tables != a.Tables+b.Tables || w.Transient != a.Transient+b.Transient {
		t.Errorf("wave tables %d + %d, want the requests' %d+%d and %d+%d", w.Tables, w.Transient, a.Tables, b.Tables, a.Transient, b.Transient)
	}
	if a.Results >= b.Results || s.TokenBytes(replay.Options{TopK: 3}) <= s.TokenBytes(replay.Options{}) {
		t.Errorf("a top-k and lens layers hold nothing: %d, %d", a.Results, b.Results)
	}
	if held := s.Estimate(Output{Request: lens.Request}); held.Tables != 0 || held.Transient != 0 || held.Results != b.Results {
		t.Errorf("results only: %+v, want the results of %+v alone", held, b)
	}
}

// allocBytes follows the Go allocator's size classes and pages; arrowBuf the builders' doubling.
func TestAllocSizes(t *testing.T) {
	for _, tt := range []struct{ n, alloc, arrow int64 }{
		{0, 0, 0},
		{1, 8, 128},     // 1 byte: a 64-byte buffer with 64 bytes of alignment
		{12, 16, 128},   // a top-k of 3 int32
		{100, 112, 192}, // 128 bytes + 64
		{4096, 4096, 4864},
		{2305, 2688, 4864},
		{40000, 40960, 73728}, // 65536 + 64, in 8 KiB pages
	} {
		if got := allocBytes(tt.n); got != tt.alloc {
			t.Errorf("allocBytes(%d) = %d, want %d", tt.n, got, tt.alloc)
		}
		if got := arrowBuf(tt.n); got != tt.arrow {
			t.Errorf("arrowBuf(%d) = %d, want %d", tt.n, got, tt.arrow)
		}
	}
}
