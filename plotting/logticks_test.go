package plotting

import (
	"math"
	"slices"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
)

// labels returns the labelled ticks' labels, and fails the test on a tick outside [min, max].
func labels(t *testing.T, ticks []plot.Tick, min, max float64) []string {
	t.Helper()
	var out []string
	for _, tk := range ticks {
		if tk.Value < min || tk.Value > max {
			t.Errorf("tick %v (%q) outside [%v, %v]", tk.Value, tk.Label, min, max)
		}
		if tk.Label != "" {
			out = append(out, tk.Label)
		}
	}
	return out
}

func TestLogTicks(t *testing.T) {
	for _, tt := range []struct {
		min, max float64
		want     []string
	}{
		{200, 840, []string{"200", "300", "500"}}, // no power of ten: plot.LogTicks labels nothing here
		{1.5, 40, []string{"2", "5", "10", "20"}}, // one power of ten: 1-2-5 steps
		{1, 1000, []string{"1", "10", "100", "1000"}},
		{0.003, 0.9, []string{"0.01", "0.1"}},                              // two powers of ten: those, with unlabelled digits between
		{1, 160000, []string{"1", "10", "100", "1000", "10000", "100000"}}, // ranks over a K3-sized vocabulary
		{3e-9, 0.5, []string{"1e-08", "1e-07", "1e-06", "1e-05", "0.0001", "0.001", "0.01", "0.1"}},
		{7, 7, []string{"7"}},
	} {
		got := labels(t, LogTicks{}.Ticks(tt.min, tt.max), tt.min, tt.max)
		if !slices.Equal(got, tt.want) {
			t.Errorf("LogTicks over [%v, %v]: -want %q +got %q", tt.min, tt.max, tt.want, got)
		}
	}
	// Powers of ten are thinned past maxLogLabels; minor ticks stop on wide ranges.
	wide := LogTicks{}.Ticks(1e-300, 1e300)
	if got := labels(t, wide, 1e-300, 1e300); len(got) < 2 || len(got) > maxLogLabels {
		t.Errorf("%d labels over 600 decades, want 2..%d: %q", len(got), maxLogLabels, got)
	}
	if len(wide) > 601 {
		t.Errorf("%d ticks over 600 decades, want one a decade at most", len(wide))
	}
	// A range too narrow for digits gets linear ticks, still labelled.
	if got := labels(t, LogTicks{}.Ticks(200, 290), 200, 290); len(got) < 2 {
		t.Errorf("LogTicks over [200, 290]: labels %q, want at least two", got)
	}
	for _, span := range [][2]float64{{0, 5}, {-1, 5}, {5, 1}, {math.NaN(), 3}, {1, math.Inf(1)}} {
		if got := (LogTicks{}).Ticks(span[0], span[1]); got != nil {
			t.Errorf("LogTicks over %v: %v, want none", span, got)
		}
	}
	// Every range of integers a rank axis can have, from 1 up to 10^7, gets at least two labels.
	for lo := 1.0; lo < 1e7; lo *= 1.7 {
		for _, hi := range []float64{lo * 1.5, lo * 4, lo * 30} {
			if got := labels(t, LogTicks{}.Ticks(lo, hi), lo, hi); len(got) < 2 {
				t.Errorf("LogTicks over [%v, %v]: labels %q, want at least two", lo, hi, got)
			}
		}
	}
}

// TestLogTicksDrawn draws a log axis over ranks 200 to 840 and finds its labels in the SVG.
func TestLogTicksDrawn(t *testing.T) {
	p := newPlot("ranks", "position", "rank")
	line, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 200}, {X: 1, Y: 840}})
	if err != nil {
		t.Fatal(err)
	}
	p.Add(line)
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = LogTicks{}
	svg, err := (&Figure{Plot: p, Width: DefaultWidth, Height: DefaultHeight}).SVG()
	if err != nil {
		t.Fatal(err)
	}
	checkTexts(t, parseSVG(t, svg), "200", "300", "500")
}
