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
	index := make(map[int32]int, len(ids))
	for i, id := range ids {
		if i > 0 && ids[i-1] == id {
			return nil, fmt.Errorf("expert %d given twice", id)
		}
		index[int32(id)] = i
	}
	work := make([]ExpertRows, len(ids))
	for row := range rows {
		for j := range r.K {
			i, ok := index[r.IDs[row*r.K+j]]
			if !ok {
				continue
			}
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
