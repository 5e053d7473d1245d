package ops

import (
	"fmt"
	"runtime"
	"slices"
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

// indexRowsPerPart is the fewest rows a part of a parallel build takes: below it a part's goroutine costs
// more than its share of the scan.
const indexRowsPerPart = 16384

// build lists r's rows by expert, in parts of consecutive rows on up to GOMAXPROCS goroutines (at
// 262,144 tokens a serial build scattered 4.2 million pairs in 114 ms on the development machine, on
// the path of the expert phase's first call, with the device waiting: docs/records/run55).
func (x *expertIndex) build(r Routing) {
	k := max(r.K, 1)
	rows := len(r.IDs) / k
	x.buildParts(r, min(runtime.GOMAXPROCS(0), max(rows/indexRowsPerPart, 1)))
}

// buildParts lists r's rows by expert, in parts: rows cut into that many ranges of consecutive rows, each
// counted and then scattered by its own goroutine into its own share of every expert's list (the share
// after the earlier parts'), so the lists are the serial build's, rows ascending, whatever the parts.
func (x *expertIndex) buildParts(r Routing, parts int) {
	k := max(r.K, 1)
	rows := len(r.IDs) / k
	parts = max(min(parts, rows), 1)
	lo := func(p int) int { return p * rows / parts } // part p's rows are lo(p) .. lo(p+1)-1
	each := func(fn func(p int)) {
		var wg sync.WaitGroup
		for p := range parts {
			wg.Go(func() { fn(p) })
		}
		wg.Wait()
	}
	// the experts: one past the largest id
	top := make([]int32, parts)
	each(func(p int) {
		m := int32(-1)
		for _, id := range r.IDs[lo(p)*k : lo(p+1)*k] {
			m = max(m, id)
		}
		top[p] = m
	})
	experts := 0
	for _, m := range top {
		experts = max(experts, int(m)+1)
	}
	// count[p][e]: part p's entries of expert e
	count := make([][]int32, parts)
	each(func(p int) {
		c := make([]int32, experts)
		for _, id := range r.IDs[lo(p)*k : lo(p+1)*k] {
			if id >= 0 {
				c[id]++
			}
		}
		count[p] = c
	})
	// expert e's list starts at start[e]; part p's share of it at next[p][e] (its first free slot)
	x.start = make([]int, experts+1)
	next := make([][]int32, parts)
	for p := range next {
		next[p] = make([]int32, experts)
	}
	at := 0
	for e := range experts {
		x.start[e] = at
		for p := range parts {
			next[p][e] = int32(at)
			at += int(count[p][e])
		}
	}
	x.start[experts] = at
	x.rows, x.weights = make([]int32, at), make([]float32, at)
	// dups[p][e]: the first row of part p that chose e twice, -1 for none
	dups := make([][]int32, parts)
	each(func(p int) {
		first := slices.Clone(next[p]) // where the part's share of each list begins
		nx, dup := next[p], make([]int32, experts)
		for e := range dup {
			dup[e] = -1
		}
		for row := lo(p); row < lo(p+1); row++ {
			ids, ws := r.IDs[row*k:row*k+k], r.Weights[row*k:row*k+k]
			for j, id := range ids {
				if id < 0 {
					continue
				}
				s := nx[id]
				if s > first[id] && x.rows[s-1] == int32(row) { // within the part's share: no other goroutine writes there
					if dup[id] < 0 {
						dup[id] = int32(row)
					}
					continue
				}
				x.rows[s], x.weights[s] = int32(row), ws[j]
				nx[id] = s + 1
			}
		}
		dups[p] = dup
	})
	// the first duplicate of each expert: the earliest part's (parts ascend)
	x.dup = make([]int32, experts)
	for e := range x.dup {
		x.dup[e] = -1
		for p := range parts {
			if d := dups[p][e]; d >= 0 {
				x.dup[e] = d
				break
			}
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
