package checkpoint

import (
	"strings"
	"testing"
)

// Count is the number of tensors Check expects a spec for: all of them, less those under the skipped
// prefixes (the small model has a vision tensor).
func TestCount(t *testing.T) {
	d := openSmall(t)
	vision := 0
	for _, n := range d.Names() {
		if strings.HasPrefix(n, "vision_tower.") {
			vision++
		}
	}
	if vision == 0 {
		t.Fatal("the small model has no vision tensor to skip")
	}
	for _, tc := range []struct {
		name string
		skip []string
		want int
	}{
		{"no prefix", nil, d.Len()},
		{"vision skipped", []string{"vision_tower.", "mm_projector."}, d.Len() - vision},
		{"everything skipped", []string{""}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := d.Count(tc.skip...); got != tc.want {
				t.Errorf("Count(%q): -want %d +got %d", tc.skip, tc.want, got)
			}
		})
	}
}
