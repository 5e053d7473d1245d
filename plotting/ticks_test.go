package plotting

import (
	"math"
	"slices"
	"testing"
)

// TestLinearTicks: labels at 1-2-5 steps, at least four and at most ten, inside the range, written with
// the decimals the step needs; none for a range that is not finite.
func TestLinearTicks(t *testing.T) {
	for _, c := range []struct {
		min, max float64
		want     []string
	}{
		{0, 27, []string{"0", "5", "10", "15", "20", "25"}}, // gonum's default: 0 and 25
		{0, 8.5, []string{"0", "2", "4", "6", "8"}},
		{0, 1, []string{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}},
		{-3, 3, []string{"-3", "-2", "-1", "0", "1", "2", "3"}},
		{-0.7, 0.7, []string{"-0.6", "-0.4", "-0.2", "0.0", "0.2", "0.4", "0.6"}},
		{7.1, 7.4, []string{"7.1", "7.2", "7.3", "7.4"}},
		{7.12, 7.31, []string{"7.15", "7.20", "7.25", "7.30"}},
		{1200, 98000, []string{"20000", "40000", "60000", "80000"}},
		{2.5, 2.5, []string{"2.5"}},
	} {
		var labels []string
		for _, tk := range (LinearTicks{}).Ticks(c.min, c.max) {
			if tk.Value < c.min-1e-12 || tk.Value > c.max+1e-12 {
				t.Errorf("[%g, %g]: tick at %g outside the range", c.min, c.max, tk.Value)
			}
			if tk.Label != "" {
				labels = append(labels, tk.Label)
			}
		}
		if !slices.Equal(labels, c.want) {
			t.Errorf("[%g, %g]: labels %q, want %q", c.min, c.max, labels, c.want)
		}
	}
	for _, span := range [][2]float64{{math.NaN(), 1}, {0, math.Inf(1)}, {math.Inf(-1), 0}, {2, 1}} {
		if ticks := (LinearTicks{}).Ticks(span[0], span[1]); ticks != nil {
			t.Errorf("%v: %d ticks, want none", span, len(ticks))
		}
	}
	// any finite range: between four and ten labels, increasing
	for _, span := range [][2]float64{{0, 1e-9}, {-1e12, 3e12}, {0.001, 0.0013}, {-5e-300, 5e-300}, {1e15, 1e15 + 3}} {
		ticks := (LinearTicks{}).Ticks(span[0], span[1])
		var vals []float64
		for _, tk := range ticks {
			if tk.Label != "" {
				vals = append(vals, tk.Value)
			}
		}
		if len(vals) < minLinearLabels || len(vals) > 10 || !slices.IsSorted(vals) {
			t.Errorf("%v: labelled ticks at %v, want 4 to 10 in order", span, vals)
		}
	}
}
