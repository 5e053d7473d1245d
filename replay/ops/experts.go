package ops

import (
	"fmt"
	"slices"
)

// ExpertRows are the rows of a wave (ascending) that chose one expert, with their routing weights: the
// work of that expert in ExpertsAccumulate.
type ExpertRows struct {
	Rows    []int32
	Weights []float32
}

// AssignRows lists, for each expert of ids (ascending, distinct), the rows of the first `rows` of r that
// chose it, in ascending row order. Experts that r chose but ids does not hold are skipped (they come in
// another call). A row that lists one expert twice is an error. Both backends plan ExpertsAccumulate
// with it, so the rows each expert sums over are the same everywhere.
func (r Routing) AssignRows(ids []int, rows int) ([]ExpertRows, error) {
	if !slices.IsSorted(ids) {
		return nil, fmt.Errorf("expert ids %v are not ascending", ids)
	}
	if len(r.IDs) < rows*r.K || len(r.Weights) < rows*r.K {
		return nil, fmt.Errorf("routing of %d ids and %d weights for %d rows of %d experts", len(r.IDs), len(r.Weights), rows, r.K)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	if ids[0] < 0 {
		return nil, fmt.Errorf("expert id %d is negative", ids[0])
	}
	if r.index != nil && len(r.IDs) == rows*r.K && len(r.Weights) == rows*r.K {
		return r.index.assign(r, ids)
	}
	// index[id] is id's place in ids, or -1: a slice, not a map, since this runs for every (row, choice)
	// of a wave (a quarter of a million at 16k tokens) in every call.
	index := make([]int32, ids[len(ids)-1]+1)
	for i := range index {
		index[i] = -1
	}
	for i, id := range ids {
		if i > 0 && ids[i-1] == id {
			return nil, fmt.Errorf("expert %d given twice", id)
		}
		index[id] = int32(i)
	}
	work := make([]ExpertRows, len(ids))
	for row := range rows {
		for j := range r.K {
			id := r.IDs[row*r.K+j]
			if id < 0 || int(id) >= len(index) || index[id] < 0 {
				continue
			}
			i := index[id]
			w := &work[i]
			if n := len(w.Rows); n > 0 && w.Rows[n-1] == int32(row) {
				return nil, fmt.Errorf("row %d chose expert %d twice", row, ids[i])
			}
			w.Rows = append(w.Rows, int32(row))
			w.Weights = append(w.Weights, r.Weights[row*r.K+j])
		}
	}
	return work, nil
}
