package kernel

import (
	"bytes"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// The engine's reports become the display's: title by state, bytes, time, done and error.
func TestDisplayProgress(t *testing.T) {
	for _, tt := range []struct {
		p           api.Progress
		title, line string
	}{
		{api.Progress{ID: "j", State: api.StateQueued, QueuePosition: 2, Layers: 93, Tokens: 40},
			"job j queued (position 2)", "0 of 93 layers done · next layer 0 · 40 tokens · ETA …"},
		{api.Progress{ID: "j", State: api.StateRunning, Wave: 3, Layer: 31, Layers: 93, Tokens: 12345, BytesRead: 500e9, ElapsedSeconds: 10},
			"job j running", "31 of 93 layers done · next layer 31 · 12,345 tokens · 50 GB/s · ETA 20s"},
		{api.Progress{ID: "j", State: api.StateRunning, Wave: 3, Layer: 93, Layers: 93, Tokens: 7, ElapsedSeconds: 29},
			"job j running", "93 of 93 layers done · 7 tokens · reading out"},
		{api.Progress{ID: "j", State: api.StateDone, Wave: 3, Layer: 93, Layers: 93, ElapsedSeconds: 30},
			"job j done", "93 of 93 layers done · done in 30s"},
		{api.Progress{ID: "j", State: api.StateFailed, Layer: 4, Layers: 93, Error: "out of memory", ElapsedSeconds: 1},
			"job j failed", "4 of 93 layers done · next layer 4 · failed: out of memory"},
	} {
		d := displayProgress(tt.p)
		if d.Title != tt.title || d.Summary() != tt.line {
			t.Errorf("(-want +got):\n-%s | %s\n+%s | %s", tt.title, tt.line, d.Title, d.Summary())
		}
	}
}

// The lines on a writer: each says something new. Queued, then the wave's start, say "0 of N layers done"
// once; the report after the last layer (the readout left) prints nothing, and the final line, with no
// ETA, ends it.
func TestProgressLines(t *testing.T) {
	var buf bytes.Buffer
	v := &view{id: "j", w: &buf}
	run := func(layer int, s float64) api.Progress {
		return api.Progress{ID: "j", State: api.StateRunning, Wave: 7, Layer: layer, Layers: 2, Tokens: 7, BytesRead: int64(layer) * 1e6, ElapsedSeconds: s}
	}
	for _, p := range []api.Progress{
		{ID: "j", State: api.StateQueued, QueuePosition: 2, Layers: 2, Tokens: 7},
		{ID: "j", State: api.StateQueued, QueuePosition: 2, Layers: 2, Tokens: 7, ElapsedSeconds: 1}, // no news
		{ID: "j", State: api.StateQueued, QueuePosition: 1, Layers: 2, Tokens: 7},
		run(0, 0), run(0, 0.5), // the plan or the rate changed: no news
		run(1, 1), run(2, 2),
	} {
		v.update(p)
	}
	done := run(2, 2.5)
	done.State = api.StateDone
	v.finish(done)
	want := `job j queued (position 2)
job j queued (position 1)
job j: 0 of 2 layers done · next layer 0 · 7 tokens · ETA …
job j: 1 of 2 layers done · next layer 1 · 7 tokens · 1 MB/s · ETA 2s
job j: 2 of 2 layers done · 7 tokens · 800 kB/s · done in 3s
`
	if got := buf.String(); got != want {
		t.Errorf("(-want +got):\n-%s\n+%s", strings.ReplaceAll(want, "\n", "\n-"), strings.ReplaceAll(got, "\n", "\n+"))
	}
}
