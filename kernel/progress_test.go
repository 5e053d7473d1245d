package kernel

import (
	"bytes"
	"strings"
	"testing"
	"time"

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
			"job j in wave 3", "31 of 93 layers done · next layer 31 · 12,345 tokens · 50 GB/s · ETA 20s"},
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
	var buf bytes.Buffer
	v := &view{id: "j", w: &buf}
	for l := 0; l <= 2; l++ {
		v.update(api.Progress{ID: "j", State: api.StateRunning, Layer: l, Layers: 2, ElapsedSeconds: 1})
		v.update(api.Progress{ID: "j", State: api.StateRunning, Layer: l, Layers: 2, ElapsedSeconds: 1}) // no news
	}
	v.finish(api.Progress{ID: "j", State: api.StateDone, Layer: 2, Layers: 2, ElapsedSeconds: float64(time.Second) / 1e9})
	if n := strings.Count(buf.String(), "\n"); n != 4 {
		t.Errorf("%d lines, want one per layer and one at the end:\n%s", n, buf.String())
	}
}
