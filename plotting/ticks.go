package plotting

import (
	"math"
	"strconv"

	"gonum.org/v1/plot"
)

// LayerTicks is the tick marker for an axis of layers (or any whole numbers): every layer labelled while
// at most 24 fit, else every 2nd, 5th, 10th ... layer, with unlabelled ticks at the others. gonum's
// default ticker labelled only layers 0, 3 and 6 of eight:
//
//	p.X.Tick.Marker = plotting.LayerTicks{}
type LayerTicks struct{}

// Ticks implements plot.Ticker.
//
// Past maxLayerTicks layers (no model has that many; a table of bad layer numbers might) only the
// labelled ticks are drawn, at a step that keeps them near 24, so the ticks never outnumber the page.
func (LayerTicks) Ticks(min, max float64) []plot.Tick {
	if math.IsNaN(min) || math.IsNaN(max) || max < min || max-min > 1<<40 { // (infinite spans too)
		return nil
	}
	lo, hi := int64(math.Ceil(min)), int64(math.Floor(max))
	step := int64(1)
	for _, nice := range []int64{1, 2, 5, 10, 20, 50, 100} {
		step = nice
		if (hi-lo)/nice < 24 {
			break
		}
	}
	every := int64(1) // draw every layer's tick, labelled or not
	if hi-lo > maxLayerTicks {
		for step = 100; (hi-lo)/step >= 24; step *= 10 {
		}
		every = step
	}
	var ticks []plot.Tick
	for l := lo + (every-lo%every)%every; l <= hi; l += every {
		t := plot.Tick{Value: float64(l)}
		if l%step == 0 {
			t.Label = strconv.FormatInt(l, 10)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// maxLayerTicks is the most layers LayerTicks draws a tick for each of.
const maxLayerTicks = 1024

// LinearTicks is the tick marker for a linear axis of measurements (entropies, norms, weights): labels at
// steps of 1, 2 or 5 times a power of ten, the largest step that gives at least four of them (at most
// ten), each written with the decimals its step needs, and unlabelled ticks between them. gonum's
// default ticker labelled only 0 and 25 of an axis from 0 to 27:
//
//	p.Y.Tick.Marker = plotting.LinearTicks{}
//
// A range that is not finite gets no ticks; an empty one (min == max) one labelled tick.
type LinearTicks struct{}

// minLinearLabels is the fewest labels LinearTicks gives a range (unless it is empty).
const minLinearLabels = 4

// Ticks implements plot.Ticker.
func (LinearTicks) Ticks(min, max float64) []plot.Tick {
	if math.IsNaN(min) || math.IsNaN(max) || math.IsInf(min, 0) || math.IsInf(max, 0) || max < min {
		return nil
	}
	if min == max {
		return []plot.Tick{{Value: min, Label: strconv.FormatFloat(min, 'g', 6, 64)}}
	}
	// the largest 1-2-5 step with at least minLinearLabels multiples in [min, max]
	e := math.Floor(math.Log10(max - min))
	var step float64
	var minors int
	for ; e > -324; e-- { // (a span of subnormal size gets none)
		for _, m := range []struct {
			digit  float64
			minors int
		}{{5, 5}, {2, 4}, {1, 5}} {
			step, minors = m.digit*math.Pow(10, e), m.minors
			if math.Floor(max/step)-math.Ceil(min/step)+1 >= minLinearLabels {
				return linearTicks(min, max, step, minors)
			}
		}
	}
	return nil
}

// linearTicks are the labelled multiples of step in [lo, hi] and minors-1 unlabelled ticks between
// each two.
func linearTicks(lo, hi, step float64, minors int) []plot.Tick {
	decimals := max(0, int(-math.Floor(math.Log10(step)+1e-9)))
	fine := step / float64(minors)
	var ticks []plot.Tick
	for i := math.Ceil(lo / fine); i <= math.Floor(hi/fine); i++ {
		t := plot.Tick{Value: i * fine}
		if math.Mod(i, float64(minors)) == 0 {
			t.Label = strconv.FormatFloat(t.Value, 'f', decimals, 64)
			if t.Label == "-"+strconv.FormatFloat(0, 'f', decimals, 64) {
				t.Label = t.Label[1:]
			}
		}
		ticks = append(ticks, t)
	}
	return ticks
}
