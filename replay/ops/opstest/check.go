package opstest

import (
	"fmt"
	"math"

	"github.com/potato-k3/potato-k3/replay/bf16"
)

// tol is an elementwise tolerance: |got - ref| <= abs + |ref| * rel.
type tol struct{ abs, rel float64 }

// scaled returns the tolerance multiplied by f (for chains of rounding points, with the reason at the
// call site).
func (t tol) scaled(f float64) tol { return tol{t.abs * f, t.rel * f} }

// closeness summarises a comparison of got against ref.
type closeness struct {
	maxAbs, maxRel float64 // largest |got-ref| and |got-ref|/|ref| (ref != 0)
	worst          int     // index of the largest error relative to its tolerance
	worstFrac      float64 // that error as a fraction of its tolerance (> 1 fails)
	bad            int     // elements out of tolerance (NaN where ref is not counts as out)
}

func measure[T float32 | float64](got []T, ref []float64, tl tol) closeness {
	var c closeness
	for i, r := range ref {
		g := float64(got[i])
		d := math.Abs(g - r)
		if math.IsNaN(g) && math.IsNaN(r) || g == r { // equal, including both infinite with one sign
			d = 0
		} else if math.IsNaN(d) {
			d = math.Inf(1)
		}
		c.maxAbs = max(c.maxAbs, d)
		if r != 0 {
			c.maxRel = max(c.maxRel, d/math.Abs(r))
		}
		allowed := tl.abs + math.Abs(r)*tl.rel
		frac := d / allowed
		if allowed == 0 {
			frac = 0
			if d > 0 {
				frac = math.Inf(1)
			}
		}
		if frac > 1 {
			c.bad++
		}
		if frac > c.worstFrac || i == 0 {
			c.worst, c.worstFrac = i, frac
		}
	}
	return c
}

// close checks got against ref elementwise within tl. cols (> 0) lets the report give the worst element
// as (row, col).
func (s *suite) close(what string, got []float32, ref []float64, cols int, tl tol) bool {
	s.Helper()
	return closeTo(s, what, got, ref, cols, tl)
}

// closeTo is close for float32 or float64 results.
func closeTo[T float32 | float64](s *suite, what string, got []T, ref []float64, cols int, tl tol) bool {
	s.Helper()
	if len(got) != len(ref) {
		s.Errorf("%s: %d values, want %d", what, len(got), len(ref))
		return false
	}
	if len(ref) == 0 {
		return true
	}
	c := measure(got, ref, tl)
	at := fmt.Sprint(c.worst)
	if cols > 0 {
		at = fmt.Sprintf("[%d,%d]", c.worst/cols, c.worst%cols)
	}
	if c.bad > 0 {
		s.Errorf("%s: %d of %d values out of tolerance (abs %.3g + rel %.3g): max abs err %.4g, max rel err %.4g; "+
			"worst at %s: got %.9g, ref %.9g, %.0f%% of its tolerance",
			what, c.bad, len(ref), tl.abs, tl.rel, c.maxAbs, c.maxRel, at, got[c.worst], ref[c.worst], 100*c.worstFrac)
		return false
	}
	s.Logf("%s: max abs err %.3g, max rel err %.3g, worst %.0f%% of tolerance at %s", what, c.maxAbs, c.maxRel, 100*c.worstFrac, at)
	return true
}

// roundedOutput checks the rounding contract of an op's output against a reference that rounds at the
// same points. In BF16 every value must be a bfloat16 value, and all but a few must equal the reference
// exactly: float32 and float64 arithmetic land on different sides of a rounding boundary only rarely
// (their difference is far below half a bfloat16 ulp), while a skipped or added rounding point moves a
// large share of the values by an ulp, which the tolerance alone would let through. In FP32, where the
// inputs are random float32 values, some value must not be a bfloat16 value (an FP32 backend that rounds
// would make every one of them one); small outputs skip that side, they can be bf16 by chance.
func (s *suite) roundedOutput(what string, got []float32, ref []float64) {
	s.Helper()
	if s.bf {
		off := 0
		for i, x := range got {
			if !math.IsNaN(float64(x)) && bf16.Round(x) != x {
				s.Errorf("%s: bf16 precision: value %d = %.9g (bits %#08x) is not a bfloat16 value: a rounding point was skipped",
					what, i, x, math.Float32bits(x))
				return
			}
			if float64(x) != ref[i] {
				off++
			}
		}
		if allowed := 2 + len(got)/50; off > allowed {
			s.Errorf("%s: bf16 precision: %d of %d values differ from the reference's rounding (at most %d may): "+
				"the op rounds at other points than the contract", what, off, len(got), allowed)
		} else {
			s.Logf("%s: %d of %d values one rounding off the reference", what, off, len(got))
		}
		return
	}
	if len(got) < 64 {
		return
	}
	for _, x := range got {
		if bf16.Round(x) != x {
			return
		}
	}
	s.Errorf("%s: fp32 precision: all %d values are bfloat16 values: the backend rounds in fp32 mode", what, len(got))
}

// same checks that two results are identical bit for bit.
func (s *suite) same(what string, got, want []float32, cols int) bool {
	s.Helper()
	if len(got) != len(want) {
		s.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return false
	}
	diff, first := 0, -1
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			diff++
			if first < 0 {
				first = i
			}
		}
	}
	if diff > 0 {
		at := fmt.Sprint(first)
		if cols > 0 {
			at = fmt.Sprintf("[%d,%d]", first/cols, first%cols)
		}
		s.Errorf("%s: %d of %d values differ in their bits; first at %s: got %.9g (%#08x), want %.9g (%#08x)",
			what, diff, len(got), at, got[first], math.Float32bits(got[first]), want[first], math.Float32bits(want[first]))
		return false
	}
	return true
}

// fails runs call, which must return an error and must not panic.
func (s *suite) fails(what string, call func() error) {
	s.Helper()
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
				s.Errorf("%s: panicked instead of returning an error: %v", what, p)
			}
		}()
		return call()
	}()
	if err == nil {
		s.Errorf("%s: no error", what)
	}
}
