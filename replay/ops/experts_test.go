package ops

import (
	"reflect"
	"strings"
	"testing"
)

func TestAssignRows(t *testing.T) {
	r := Routing{K: 2, IDs: []int32{3, 1, 1, 5, 3, 5}, Weights: []float32{.1, .2, .3, .4, .5, .6}}
	got, err := r.AssignRows([]int{1, 3}, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []ExpertRows{{Rows: []int32{0, 1}, Weights: []float32{.2, .3}}, {Rows: []int32{0, 2}, Weights: []float32{.1, .5}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("AssignRows = %+v, want %+v", got, want)
	}
	// Ids of the routing outside ids (negative, past the largest, between) are another call's.
	odd := Routing{K: 3, IDs: []int32{-4, 2, 900, 7, 2, 4}, Weights: []float32{1, 2, 3, 4, 5, 6}}
	got, err = odd.AssignRows([]int{2, 4}, 2)
	want = []ExpertRows{{Rows: []int32{0, 1}, Weights: []float32{2, 5}}, {Rows: []int32{1}, Weights: []float32{6}}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("AssignRows with other experts' ids = %+v, %v; want %+v", got, err, want)
	}
	for _, tc := range []struct {
		r    Routing
		ids  []int
		want string
	}{
		{Routing{K: 2, IDs: []int32{1, 1}, Weights: []float32{1, 1}}, []int{1}, "row 0 chose expert 1 twice"},
		{r, []int{3, 1}, "not ascending"},
		{r, []int{1, 1}, "expert 1 given twice"},
		{Routing{K: 2, IDs: []int32{1}}, []int{1}, "routing of 1 ids"},
		{r, []int{-1, 3}, "expert id -1 is negative"},
	} {
		if _, err := tc.r.AssignRows(tc.ids, 1); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("AssignRows(%v) = %v, want an error containing %q", tc.ids, err, tc.want)
		}
	}
}
