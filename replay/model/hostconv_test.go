package model

import (
	"math"
	"testing"
)

// TestBF16Conversions: the host state's conversions give every value's bits, split over goroutines or not,
// and a single value that is not a bfloat16 value anywhere keeps the array in float32.
func TestBF16Conversions(t *testing.T) {
	for _, n := range []int{0, 1, 1000, 3*convChunk + 7} {
		v := make([]float32, n)
		for i := range v {
			v[i] = math.Float32frombits(uint32(i*2654435761) &^ 0xffff) // bfloat16 values, many patterns
		}
		bf, ok := toBF16Bits(v)
		if !ok {
			t.Fatalf("n=%d: bfloat16 values refused", n)
		}
		back := fromBF16Bits(bf)
		for i := range v {
			if math.Float32bits(back[i]) != math.Float32bits(v[i]) {
				t.Fatalf("n=%d: value %d: %#x back as %#x", n, i, math.Float32bits(v[i]), math.Float32bits(back[i]))
			}
		}
		if n == 0 {
			continue
		}
		for _, at := range []int{0, n / 2, n - 1} {
			w := append([]float32(nil), v...)
			w[at] = math.Float32frombits(math.Float32bits(w[at]) | 1)
			if _, ok := toBF16Bits(w); ok {
				t.Errorf("n=%d: a float32 value at %d taken for bfloat16", n, at)
			}
		}
	}
}
