package plotting

import (
	"fmt"
	"slices"
)

// ExpertUsage counts how often each routed expert was chosen, per MoE layer.
type ExpertUsage struct {
	Layers []int32 // the MoE layers seen, ascending
	// Counts[i][e] is how many tokens chose expert e at layer Layers[i].
	Counts [][]int
	Tokens []int // Tokens[i] is how many tokens were routed at layer Layers[i]
}

// CountExperts counts the router rows of every sequence. numExperts is the number of routed experts (896
// for K3); 0 takes the largest id seen plus one. An id outside [0, numExperts) or chosen twice by one
// token is an error.
func CountExperts(rows []RouterRow, numExperts int) (ExpertUsage, error) {
	var u ExpertUsage
	if len(rows) == 0 {
		return u, inputError("CountExperts: no router rows")
	}
	if numExperts <= 0 {
		for _, r := range rows {
			for _, e := range r.ExpertIDs {
				numExperts = max(numExperts, int(e)+1)
			}
		}
		if numExperts == 0 {
			return u, inputError("CountExperts: no expert ids in %d router rows", len(rows))
		}
	}
	index := map[int32]int{}
	for _, r := range rows {
		if _, ok := index[r.Layer]; !ok {
			index[r.Layer] = 0
			u.Layers = append(u.Layers, r.Layer)
		}
	}
	slices.Sort(u.Layers)
	for i, l := range u.Layers {
		index[l] = i
	}
	u.Counts = make([][]int, len(u.Layers))
	for i := range u.Counts {
		u.Counts[i] = make([]int, numExperts)
	}
	u.Tokens = make([]int, len(u.Layers))
	for _, r := range rows {
		li := index[r.Layer]
		for k, e := range r.ExpertIDs {
			if e < 0 || int(e) >= numExperts {
				return u, inputError("CountExperts: seq %d pos %d layer %d: expert id %d outside [0, %d)",
					r.SeqID, r.Pos, r.Layer, e, numExperts)
			}
			if slices.Contains(r.ExpertIDs[:k], e) {
				return u, inputError("CountExperts: seq %d pos %d layer %d: expert %d chosen twice",
					r.SeqID, r.Pos, r.Layer, e)
			}
			u.Counts[li][e]++
		}
		u.Tokens[li]++
	}
	return u, nil
}

// ExpertUsageHeatmap draws u as a heatmap: MoE layer on y (first at the bottom), expert id on x, the
// number of tokens that chose the expert as colour. A column that stays dark across layers is an expert
// this data never needs; a bright cell is one a wave would read for many tokens. The colour scale starts
// at 0 tokens. title may be empty.
func ExpertUsageHeatmap(u ExpertUsage, title string) (*Figure, error) {
	if len(u.Layers) == 0 || len(u.Counts) != len(u.Layers) {
		return nil, inputError("ExpertUsageHeatmap: %d layers and %d rows of counts", len(u.Layers), len(u.Counts))
	}
	z := make([][]float64, len(u.Counts))
	for i, row := range u.Counts {
		if len(row) != len(u.Counts[0]) || len(row) == 0 {
			return nil, inputError("ExpertUsageHeatmap: layer %d has %d experts, layer %d has %d",
				u.Layers[i], len(row), u.Layers[0], len(u.Counts[0]))
		}
		z[i] = make([]float64, len(row))
		for e, n := range row {
			z[i][e] = float64(n)
		}
	}
	if title == "" {
		tokens := 0
		if len(u.Tokens) > 0 {
			tokens = u.Tokens[0]
		}
		title = fmt.Sprintf("Routed expert usage (%d layers, %d tokens)", len(u.Layers), tokens)
	}
	return newHeatmap(heatmapSpec{
		title: title, xLabel: "expert", yLabel: "layer", scaleLabel: "tokens", z: z,
		rowValues: int32sToFloats(u.Layers), fromZero: true,
	})
}
