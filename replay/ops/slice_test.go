package ops

import (
	"fmt"
	"testing"
)

// TestCutSlices: every slicing covers each sequence's rows once, in order, with the offsets and open
// flags that a carry chain needs.
func TestCutSlices(t *testing.T) {
	cases := []struct {
		lens []int
		n    int
	}{
		{[]int{5}, 0}, {[]int{5}, 5}, {[]int{5}, 1}, {[]int{5}, 2}, {[]int{3, 4}, 3}, {[]int{3, 4}, 4},
		{[]int{1, 2, 5, 64, 65, 130}, 7}, {[]int{1, 2, 5, 64, 65, 130}, 64}, {[]int{0, 3, 0, 2}, 2}, {[]int{4, 0}, 4},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%v/%d", c.lens, c.n), func(t *testing.T) {
			l := Layout{Starts: []int{0}}
			for _, n := range c.lens {
				l.Starts = append(l.Starts, l.Starts[len(l.Starts)-1]+n)
			}
			slices := CutSlices(l, c.n)
			bounds := SliceBounds(slices)
			if bounds[len(bounds)-1] != l.Tokens() {
				t.Fatalf("slices cover %d rows, want %d", bounds[len(bounds)-1], l.Tokens())
			}
			// Rebuild each sequence's length from the pieces: a piece continues the previous one exactly
			// when its slice has an offset and it is the slice's first.
			var got []int
			open := false
			for j, sl := range slices {
				if c.n > 0 && sl.Tokens() > c.n {
					t.Errorf("slice %d has %d rows, more than %d", j, sl.Tokens(), c.n)
				}
				if (sl.Offset > 0) != open {
					t.Fatalf("slice %d: offset %d after open %v", j, sl.Offset, open)
				}
				for s := range sl.Sequences() {
					n := sl.Starts[s+1] - sl.Starts[s]
					if s == 0 && sl.Offset > 0 {
						if sl.Offset != got[len(got)-1] {
							t.Errorf("slice %d: offset %d, want %d", j, sl.Offset, got[len(got)-1])
						}
						got[len(got)-1] += n
						continue
					}
					got = append(got, n)
				}
				open = sl.Open
			}
			if fmt.Sprint(got) != fmt.Sprint(c.lens) {
				t.Errorf("sequences rebuilt from the slices: %v, want %v (slices %v)", got, c.lens, slices)
			}
		})
	}
}
