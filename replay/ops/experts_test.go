package ops

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// TestAssignRows: each expert's rows in ascending order with their weights, other experts' ids skipped,
// the errors named; the same with the routing indexed (Indexed).
func TestAssignRows(t *testing.T) {
	for _, indexed := range []bool{false, true} {
		t.Run(fmt.Sprintf("indexed=%v", indexed), func(t *testing.T) { testAssignRows(t, indexed) })
	}
}

func testAssignRows(t *testing.T, indexed bool) {
	ix := func(r Routing) Routing {
		if indexed {
			return r.Indexed()
		}
		return r
	}
	r := ix(Routing{K: 2, IDs: []int32{3, 1, 1, 5, 3, 5}, Weights: []float32{.1, .2, .3, .4, .5, .6}})
	got, err := r.AssignRows([]int{1, 3}, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []ExpertRows{{Rows: []int32{0, 1}, Weights: []float32{.2, .3}}, {Rows: []int32{0, 2}, Weights: []float32{.1, .5}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("AssignRows = %+v, want %+v", got, want)
	}
	// Ids of the routing outside ids (negative, past the largest, between) are another call's.
	odd := ix(Routing{K: 3, IDs: []int32{-4, 2, 900, 7, 2, 4}, Weights: []float32{1, 2, 3, 4, 5, 6}})
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
		{ix(Routing{K: 2, IDs: []int32{1, 1}, Weights: []float32{1, 1}}), []int{1}, "row 0 chose expert 1 twice"},
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

// TestAssignRowsIndexed: on random routings, an indexed routing gives every call (random ascending
// subsets of the experts, several calls on one index) the lists the unindexed scan gives; a call that
// would skip a duplicated expert still succeeds.
func TestAssignRowsIndexed(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 20 {
		experts, k, rows := 1+rng.IntN(40), 1+rng.IntN(6), rng.IntN(300)
		k, r := randomRouting(rng, experts, k, rows)
		if trial%5 == 4 && rows > 0 && k > 1 { // a duplicate: refused only by calls that hold its expert
			r.IDs[1] = r.IDs[0]
		}
		x := r.Indexed()
		for call := range 6 {
			var ids []int
			for e := range experts + 3 {
				if rng.IntN(3) == 0 {
					ids = append(ids, e)
				}
			}
			want, werr := r.AssignRows(ids, rows)
			got, gerr := x.AssignRows(ids, rows)
			if (werr == nil) != (gerr == nil) || !reflect.DeepEqual(got, want) {
				t.Fatalf("trial %d, call %d (ids %v): indexed %+v, %v; scanned %+v, %v", trial, call, ids, got, gerr, want, werr)
			}
		}
	}
}

// TestBuildIndexParts: the index built in parts (the parallel build of a large wave's routing, rows cut
// into 1 to 9 ranges, more parts than rows included) gives each expert the list and the duplicate the
// unindexed scan gives.
func TestBuildIndexParts(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 12 {
		experts, k, rows := 1+rng.IntN(30), 1+rng.IntN(5), rng.IntN(200)
		k, r := randomRouting(rng, experts, k, rows)
		if trial%3 == 2 && rows > 3 && k > 1 { // duplicates in two rows, the later one first in its list
			r.IDs[(rows-1)*k+1] = r.IDs[(rows-1)*k]
			r.IDs[2*k+1] = r.IDs[2*k]
		}
		if trial%4 == 3 && len(r.IDs) > 0 {
			r.IDs[0] = -1 // a choice of no expert
		}
		for parts := 1; parts <= 9; parts++ {
			x := &expertIndex{}
			x.buildParts(r, parts)
			ix := Routing{K: r.K, IDs: r.IDs, Weights: r.Weights, index: x}
			x.once.Do(func() {}) // built above: assign must not build again
			for e := range experts + 1 {
				want, werr := r.AssignRows([]int{e}, rows)
				got, gerr := ix.AssignRows([]int{e}, rows)
				if fmt.Sprint(werr) != fmt.Sprint(gerr) || !reflect.DeepEqual(got, want) {
					t.Fatalf("trial %d (%d rows, top-%d of %d), %d parts, expert %d: index %+v, %v; scan %+v, %v",
						trial, rows, k, experts, parts, e, got, gerr, want, werr)
				}
			}
		}
	}
}

// randomRouting routes rows rows each to min(k, experts) distinct experts of experts, with random
// weights; it returns the k it used.
func randomRouting(rng *rand.Rand, experts, k, rows int) (int, Routing) {
	k = min(k, experts)
	r := Routing{K: k, IDs: make([]int32, rows*k), Weights: make([]float32, rows*k)}
	for row := range rows {
		for j, e := range rng.Perm(experts)[:k] {
			r.IDs[row*k+j], r.Weights[row*k+j] = int32(e), rng.Float32()
		}
	}
	return k, r
}
