package model

import (
	"fmt"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestCallRuns: an expert call's ascending experts are cut into consecutive runs of at most the pairs
// given, each as long as the bound lets it be, an expert past the bound alone; no bound, one run.
func TestCallRuns(t *testing.T) {
	pairs := []int{0: 3, 1: 1, 2: 0, 3: 4, 4: 2, 5: 9, 6: 1, 7: 1} // ids past the table have none
	for _, c := range []struct {
		ids  []int
		most int
		want []int
	}{
		{nil, 4, nil},
		{[]int{0, 1, 3}, -1, []int{3}},
		{[]int{0, 1, 3}, 8, []int{3}},
		{[]int{0, 1, 3}, 4, []int{2, 3}},          // 3+1, 4
		{[]int{0, 1, 2, 3, 4}, 4, []int{3, 4, 5}}, // 3+1+0, 4, 2
		{[]int{4, 5, 6}, 4, []int{1, 2, 3}},       // 2, 9 alone (over the bound), 1
		{[]int{6, 7, 9, 12}, 2, []int{4}},         // 1+1+0+0: experts without pairs join the run
		{[]int{5}, 1, []int{1}},
		{[]int{0, 1, 3, 4, 5, 6, 7}, 0, []int{1, 2, 3, 4, 5, 6, 7}}, // a bound of 0: every expert with pairs alone
	} {
		got := callRuns(c.ids, pairs, c.most)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("callRuns(%v, most %d) = %v, want %v", c.ids, c.most, got, c.want)
		}
		// every run within the bound unless it is one expert; runs as long as the bound lets them be
		start := 0
		for i, end := range got {
			sum := 0
			for _, id := range c.ids[start:end] {
				if id < len(pairs) {
					sum += pairs[id]
				}
			}
			if c.most >= 0 && sum > c.most && end-start > 1 {
				t.Errorf("callRuns(%v, most %d): run %v has %d pairs", c.ids, c.most, c.ids[start:end], sum)
			}
			if i+1 < len(got) && c.ids[end] < len(pairs) && sum+pairs[c.ids[end]] <= c.most {
				t.Errorf("callRuns(%v, most %d): run %v could take expert %d", c.ids, c.most, c.ids[start:end], c.ids[end])
			}
			start = end
		}
	}
}

// TestPairCounts: each expert's pairs in a routing, negative ids skipped; Chosen is the experts with any.
func TestPairCounts(t *testing.T) {
	r := ops.Routing{K: 2, IDs: []int32{3, 0, 3, -1, 5, 0}}
	if got, want := fmt.Sprint(pairCounts(r)), fmt.Sprint([]int{2, 0, 0, 2, 0, 1}); got != want {
		t.Errorf("pairCounts = %s, want %s", got, want)
	}
	if got := fmt.Sprint(Chosen(r)); got != "[0 3 5]" {
		t.Errorf("Chosen = %s, want [0 3 5]", got)
	}
}
