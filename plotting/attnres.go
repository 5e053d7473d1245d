package plotting

import (
	"fmt"
	"slices"
	"strings"
)

// AttnResOptions chooses what AttnResHeatmap shows.
type AttnResOptions struct {
	Seq int32 // the sequence (seq_id)
	// Positions are averaged over; nil means every position of the sequence.
	Positions []int32
	Title     string // default "AttnRes mixing weights (seq N, ...)"
}

// siteOrder places the sublayer inputs of one layer in the order the forward computes them.
var siteOrder = map[string]int{"attn": 0, "mlp": 1, "output": 2}

// sublayer is one row of the AttnRes heatmap.
type sublayer struct {
	layer int32
	site  string
}

// AttnResHeatmap draws the AttnRes mixing weights as a heatmap: one row per sublayer input (layer and
// site, layer 0 at the bottom), one column per block vector it mixes, b0, b1, ..., then "partial" for the
// partial sum of the current block (the last weight of each row). A sublayer that has fewer blocks behind
// it leaves the later block columns grey. The colour is the weight averaged over the chosen positions.
//
// Every position must give a sublayer the same number of weights; a mismatch is an error.
func AttnResHeatmap(rows []AttnResRow, opts AttnResOptions) (*Figure, error) {
	want := map[int32]bool{}
	for _, p := range opts.Positions {
		want[p] = true
	}
	sums := map[sublayer][]float64{}
	counts := map[sublayer]int{}
	positions := map[int32]bool{}
	for _, r := range rows {
		if r.SeqID != opts.Seq || (opts.Positions != nil && !want[r.Pos]) {
			continue
		}
		if len(r.Weights) == 0 {
			return nil, inputError("AttnResHeatmap: seq %d pos %d layer %d %s: no weights", r.SeqID, r.Pos, r.Layer, r.Site)
		}
		k := sublayer{r.Layer, r.Site}
		s, ok := sums[k]
		if !ok {
			s = make([]float64, len(r.Weights))
			sums[k] = s
		}
		if len(s) != len(r.Weights) {
			return nil, inputError("AttnResHeatmap: seq %d layer %d %s: %d weights at pos %d, %d at an earlier position",
				r.SeqID, r.Layer, r.Site, len(r.Weights), r.Pos, len(s))
		}
		for i, w := range r.Weights {
			s[i] += w
		}
		counts[k]++
		positions[r.Pos] = true
	}
	if len(sums) == 0 {
		return nil, inputError("AttnResHeatmap: no attnres rows for seq %d at the chosen positions (of %d rows)", opts.Seq, len(rows))
	}

	subs := make([]sublayer, 0, len(sums))
	blocks := 0 // the most block vectors any sublayer mixes
	for k, s := range sums {
		subs = append(subs, k)
		blocks = max(blocks, len(s)-1)
	}
	slices.SortFunc(subs, func(a, b sublayer) int {
		if a.layer != b.layer {
			return int(a.layer - b.layer)
		}
		oa, okA := siteOrder[a.site]
		ob, okB := siteOrder[b.site]
		switch {
		case okA && okB:
			return oa - ob
		case okA != okB: // known sites first
			if okA {
				return -1
			}
			return 1
		}
		return strings.Compare(a.site, b.site)
	})

	z := make([][]float64, len(subs))
	rowNames := make([]string, len(subs))
	for r, k := range subs {
		s, n := sums[k], float64(counts[k])
		z[r] = make([]float64, blocks+1)
		for c := range z[r] {
			z[r][c] = nan
		}
		for i := 0; i < len(s)-1; i++ {
			z[r][i] = s[i] / n
		}
		z[r][blocks] = s[len(s)-1] / n // the partial sum always sits in the last column
		rowNames[r] = fmt.Sprintf("L%d %s", k.layer, k.site)
	}
	colNames := make([]string, blocks+1)
	for i := 0; i < blocks; i++ {
		colNames[i] = fmt.Sprintf("b%d", i)
	}
	colNames[blocks] = "partial"

	title := opts.Title
	if title == "" {
		where := fmt.Sprintf("mean over %d positions", len(positions))
		if len(positions) == 1 {
			for p := range positions {
				where = fmt.Sprintf("pos %d", p)
			}
		}
		title = fmt.Sprintf("AttnRes mixing weights (seq %d, %s)", opts.Seq, where)
	}
	return newHeatmap(heatmapSpec{
		title: title, xLabel: "source (block vector, then the partial sum)", yLabel: "sublayer input",
		scaleLabel: "weight", z: z, rowNames: rowNames, colNames: colNames,
	})
}
