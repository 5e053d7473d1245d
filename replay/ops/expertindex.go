package ops

import (
	"fmt"
	"sync"
)

// A routing's rows listed by expert, for a routing that many ExpertsAccumulate calls share, each on a
// few of its experts (a pooled MoE layer's chunks: replay/model/moe_pool.go). Unindexed, AssignRows
// scans every (row, choice) of the routing in each call: at 262,144 tokens 4.2 million, 20-30 ms of host
// time a call and eight calls a layer, while the device waited for the calls (docs/records/run53).
// Indexed, the first call scans the routing once and every call takes its experts' lists.

// expertIndex is a routing's rows by expert, built once by the first AssignRows that uses it.
type expertIndex struct {
	once    sync.Once
	start   []int     // expert e's entries are rows[start[e]:start[e+1]]
	rows    []int32   // ascending within an expert
	weights []float32 // the rows' routing weights for that expert
	dup     []int32   // dup[e]: the first row that chose e twice, -1 for none
}

// Indexed returns r with an index of its rows by expert, shared by r's copies and built by the first
// AssignRows over all of r's rows: AssignRows gives the same lists with it as without, and refuses the
// same routings (a row that chose an expert of the call twice).
// The lists it returns then share the index's memory: callers read them, as they do the unindexed ones.
func (r Routing) Indexed() Routing {
	r.index = &expertIndex{}
	return r
}

// BuildIndex builds r's index now, if r is Indexed and it is not built yet, so that a later AssignRows
// finds it ready: a caller may run it on another goroutine while it prepares the calls (AssignRows waits
// for a build under way). r's ids and weights must not change after Indexed.
func (r Routing) BuildIndex() {
	if r.index != nil {
		r.index.once.Do(func() { r.index.build(r) })
	}
}

// build lists r's rows by expert: a counting pass, then the rows in ascending order.
func (x *expertIndex) build(r Routing) {
	experts := 0
	for _, id := range r.IDs {
		experts = max(experts, int(id)+1)
	}
	x.start = make([]int, experts+1)
	for _, id := range r.IDs {
		if id >= 0 {
			x.start[id+1]++
		}
	}
	for e := range experts {
		x.start[e+1] += x.start[e]
	}
	n := x.start[experts]
	x.rows, x.weights = make([]int32, n), make([]float32, n)
	x.dup = make([]int32, experts)
	for e := range x.dup {
		x.dup[e] = -1
	}
	next := make([]int32, experts)
	for e := range next {
		next[e] = int32(x.start[e])
	}
	k := r.K
	for row := range len(r.IDs) / max(k, 1) {
		ids, ws := r.IDs[row*k:row*k+k], r.Weights[row*k:row*k+k]
		for j, id := range ids {
			if id < 0 {
				continue
			}
			at := next[id]
			if int(at) > x.start[id] && x.rows[at-1] == int32(row) {
				if x.dup[id] < 0 {
					x.dup[id] = int32(row)
				}
				continue
			}
			x.rows[at], x.weights[at] = int32(row), ws[j]
			next[id] = at + 1
		}
	}
}

// assign is AssignRows on the index (ids ascending, distinct and not negative: the caller checked).
func (x *expertIndex) assign(r Routing, ids []int) ([]ExpertRows, error) {
	x.once.Do(func() { x.build(r) })
	dupRow, dupID := int32(-1), -1
	for i, id := range ids {
		if i > 0 && ids[i-1] == id {
			return nil, fmt.Errorf("expert %d given twice", id)
		}
		if id < len(x.dup) && x.dup[id] >= 0 && (dupRow < 0 || x.dup[id] < dupRow) {
			dupRow, dupID = x.dup[id], id
		}
	}
	if dupRow >= 0 {
		return nil, fmt.Errorf("row %d chose expert %d twice", dupRow, dupID)
	}
	work := make([]ExpertRows, len(ids))
	for i, id := range ids {
		if id >= len(x.dup) {
			continue // chosen by no row
		}
		// no duplicate among ids (above): every entry of the expert's range was filled
		if a, z := x.start[id], x.start[id+1]; z > a {
			work[i] = ExpertRows{Rows: x.rows[a:z:z], Weights: x.weights[a:z:z]}
		}
	}
	return work, nil
}
