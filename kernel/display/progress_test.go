package display

import (
	"encoding/xml"
	"strings"
	"testing"
	"time"
)

func TestProgressSummary(t *testing.T) {
	tests := []struct {
		name string
		p    Progress
		want string
	}{
		{"start", Progress{Layers: 93, Tokens: 100}, "0 of 93 layers done · next layer 0 · 100 tokens · ETA …"},
		{"by layers", Progress{Layer: 31, Layers: 93, Tokens: 12345, Bytes: 500e9, Elapsed: 10 * time.Second},
			"31 of 93 layers done · next layer 31 · 12,345 tokens · 50 GB/s · ETA 20s"},
		{"by bytes", Progress{Layer: 10, Layers: 93, Tokens: 1, Bytes: 250e9, TotalBytes: 1000e9, Elapsed: time.Minute},
			"10 of 93 layers done · next layer 10 · 1 token · 4.17 GB/s · ETA 3m03s"},
		{"done", Progress{Layer: 93, Layers: 93, Bytes: 1.5e12, Elapsed: 30 * time.Second, Done: true},
			"93 of 93 layers done · 50 GB/s · done in 30s"},
		{"failed", Progress{Layer: 4, Layers: 93, Elapsed: time.Second, Err: "out of memory"},
			"4 of 93 layers done · next layer 4 · failed: out of memory"},
		{"long", Progress{Layer: 1, Layers: 93, Elapsed: time.Hour}, "1 of 93 layers done · next layer 1 · ETA 93h00m"},
		// every layer done, the readout not: no ETA (the layers' pace says nothing of the readout's)
		{"readout left", Progress{Layer: 93, Layers: 93, Bytes: 1.5e12, Elapsed: 30 * time.Second}, "93 of 93 layers done · 50 GB/s · reading out"},
		// no report came (an unknown job): no "0 of 0 layers done"
		{"failed before any report", Progress{Err: "no job 0123456789abcdef"}, "failed: no job 0123456789abcdef"},
		{"nothing known", Progress{}, "ETA …"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Summary(); got != tt.want {
				t.Errorf("(-want +got):\n-%s\n+%s", tt.want, got)
			}
		})
	}
}

func TestProgressFraction(t *testing.T) {
	tests := []struct {
		p    Progress
		want float64
	}{
		{Progress{}, 0},
		{Progress{Layer: 1, Layers: 4}, 0.2}, // the readout after the last layer counts as a fifth step
		{Progress{Layer: 4, Layers: 4}, 0.8}, // every layer done, the readout not yet
		{Progress{Layer: 9, Layers: 4}, 1},   // clamped
		{Progress{Layer: 1, Layers: 4, Bytes: 2, TotalBytes: 4}, 0.4},
		{Progress{Layer: 1, Layers: 4, Done: true}, 1},
	}
	for _, tt := range tests {
		if got := tt.p.Fraction(); got != tt.want {
			t.Errorf("%+v: want %v, got %v", tt.p, tt.want, got)
		}
	}
}

func TestProgressHTML(t *testing.T) {
	p := Progress{Title: "replay <3> & more", Layer: 1, Layers: 4, Elapsed: time.Second}
	s := ProgressHTML(p)
	if err := xml.Unmarshal([]byte(s), new(struct{})); err != nil {
		t.Fatalf("not well-formed: %v\n%s", err, s)
	}
	for _, want := range []string{"replay &lt;3&gt; &amp; more", "width:20.0%", "1 of 4 layers done · next layer 1", "ETA 4s"} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in %s", want, s)
		}
	}
	if s != ProgressHTML(p) {
		t.Errorf("ProgressHTML is not deterministic")
	}
}

func TestFormatDurationAndRate(t *testing.T) {
	durations := []struct {
		d    time.Duration
		want string
	}{
		{850 * time.Millisecond, "850ms"},
		{42*time.Second + 400*time.Millisecond, "42s"},
		{3*time.Minute + 12*time.Second, "3m12s"},
		{time.Hour + 5*time.Minute + 20*time.Second, "1h05m"},
	}
	for _, tt := range durations {
		if got := formatDuration(tt.d); got != tt.want {
			t.Errorf("formatDuration(%v): want %q, got %q", tt.d, tt.want, got)
		}
	}
	rates := []struct {
		r    float64
		want string
	}{{12, "12 B/s"}, {55e9, "55 GB/s"}, {41.23e9, "41.2 GB/s"}, {3e15, "3000 TB/s"}}
	for _, tt := range rates {
		if got := formatRate(tt.r); got != tt.want {
			t.Errorf("formatRate(%v): want %q, got %q", tt.r, tt.want, got)
		}
	}
}

// The gonbui calls do nothing outside a notebook; they must not panic there either.
func TestGonbOutsideNotebook(t *testing.T) {
	bar := NewProgressBar()
	bar.Update(Progress{Layer: 1, Layers: 2})
	bar.Update(Progress{Layer: 2, Layers: 2})
	bar.Finish(Progress{Layer: 2, Layers: 2, Done: true})
	Display(nil, 3)
	DisplayRecords(nil, 3)
	DisplayTable(nil, 3)
}
