package plotting

import (
	"math"
	"strconv"

	"gonum.org/v1/plot"
)

// LogTicks is the tick marker for a log-scale axis, for figures of ranks or probabilities that span
// orders of magnitude:
//
//	p.Y.Scale = plot.LogScale{}
//	p.Y.Tick.Marker = plotting.LogTicks{}
//
// gonum's own plot.LogTicks labels only powers of ten, so an axis whose range holds none (ranks 200 to
// 840) has no labels at all, and one that holds a single one has a single label. LogTicks labels the
// powers of ten when the range holds at least two (thinned to at most maxLogLabels), else 1-2-5 steps
// (200, 500), 1-2-3-5 steps (200, 300, 500) or every digit (200, 300, ..., 800), whichever first gives
// three labels, with the other digits as unlabelled ticks; a range too narrow for any of them (200 to
// 290) is almost linear on a log axis, and gets gonum's linear ticks. A range a log scale cannot show
// (not positive, not finite) gets no ticks, where plot.LogTicks panics.
type LogTicks struct{}

// maxLogLabels is the most powers of ten LogTicks labels; past it only every 2nd, 3rd ... is labelled.
const maxLogLabels = 8

// maxLogMinor is the most decades that get unlabelled ticks at 2..9 times each power of ten; a wider
// range would be a grey band of them.
const maxLogMinor = 12

// Ticks implements plot.Ticker.
func (LogTicks) Ticks(min, max float64) []plot.Tick {
	if !(min > 0) || !(max >= min) || math.IsInf(max, 0) {
		return nil
	}
	if min == max {
		return []plot.Tick{{Value: min, Label: formatLogTick(min)}}
	}
	lo, hi := decade(min), decade(max) // min lies in [10^lo, 10^(lo+1)), max in [10^hi, 10^(hi+1))
	first := lo                        // the first power of ten in the range
	if pow10(lo) < min {
		first++
	}
	if powers := hi - first + 1; powers >= 2 {
		step := (powers + maxLogLabels - 1) / maxLogLabels
		var ticks []plot.Tick
		for e := lo; e <= hi; e++ {
			for m := 1; m <= 9; m++ {
				if m > 1 && hi-lo >= maxLogMinor {
					break
				}
				v := digitPow(m, e)
				if v < min || v > max {
					continue
				}
				t := plot.Tick{Value: v}
				if m == 1 && e%step == 0 {
					t.Label = formatLogTick(v)
				}
				ticks = append(ticks, t)
			}
		}
		return ticks
	}
	for _, labelled := range [][]int{{1, 2, 5}, {1, 2, 3, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}} {
		var ticks []plot.Tick
		n := 0
		for e := lo; e <= hi; e++ {
			for m := 1; m <= 9; m++ {
				v := digitPow(m, e)
				if v < min || v > max {
					continue
				}
				t := plot.Tick{Value: v}
				for _, l := range labelled {
					if m == l {
						t.Label = formatLogTick(v)
						n++
					}
				}
				ticks = append(ticks, t)
			}
		}
		if n >= 3 {
			return ticks
		}
	}
	return plot.DefaultTicks{}.Ticks(min, max)
}

// decade returns e with 10^e <= x < 10^(e+1), for a positive finite x; math.Log10 alone can be off by
// one next to a power of ten.
func decade(x float64) int {
	e := int(math.Floor(math.Log10(x)))
	if pow10(e+1) <= x {
		e++
	}
	if pow10(e) > x {
		e--
	}
	return e
}

// pow10 is 10^e as the nearest float64.
func pow10(e int) float64 { return digitPow(1, e) }

// digitPow is m * 10^e as the nearest float64 to the decimal (3e-2 is 0.03, where 3*math.Pow10(-2) is
// 0.030000000000000002, which would print so).
func digitPow(m, e int) float64 {
	v, _ := strconv.ParseFloat(strconv.Itoa(m)+"e"+strconv.Itoa(e), 64)
	return v
}

// formatLogTick writes a tick value in its shortest form: plain decimals from 0.0001 to 999999 (200,
// 0.05), exponent form outside (1e+06, 2e-05).
func formatLogTick(v float64) string {
	if v >= 1e-4 && v < 1e6 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
