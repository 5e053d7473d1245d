package plotting

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// MaxCurves is the most positions EntropyByLayer draws: past ten the colours repeat and the lines cannot be
// told apart; EntropyHeatmap shows any number.
const MaxCurves = 10

// EntropyOptions chooses what the logit-lens entropy figures show.
type EntropyOptions struct {
	Seq int32 // the sequence (seq_id)
	// Positions are the positions shown, in this order. EntropyByLayer needs 1 to MaxCurves of them;
	// EntropyHeatmap shows every position of the sequence when Positions is nil.
	Positions []int32
	// Labels name the positions (same order as Positions), for example with their token text; the
	// default is "pos N". Labels without Positions label positions 0, 1, 2 ...
	Labels []string
	Title  string // default "Logit-lens entropy by layer (seq N)"
}

// label is the name of position pos, the i-th chosen.
func (o EntropyOptions) label(i int, pos int32) string {
	if i < len(o.Labels) {
		return o.Labels[i]
	}
	return fmt.Sprintf("pos %d", pos)
}

func (o EntropyOptions) title() string {
	if o.Title != "" {
		return o.Title
	}
	return fmt.Sprintf("Logit-lens entropy by layer (seq %d)", o.Seq)
}

// lensBySeq returns the lens rows of seq indexed by position then layer.
func lensBySeq(rows []LensRow, seq int32) (map[int32]map[int32]float64, error) {
	byPos := map[int32]map[int32]float64{}
	for _, r := range rows {
		if r.SeqID != seq {
			continue
		}
		if byPos[r.Pos] == nil {
			byPos[r.Pos] = map[int32]float64{}
		}
		if _, dup := byPos[r.Pos][r.Layer]; dup {
			return nil, inputError("lens rows: seq %d pos %d layer %d appears twice", seq, r.Pos, r.Layer)
		}
		byPos[r.Pos][r.Layer] = r.Entropy
	}
	if len(byPos) == 0 {
		return nil, inputError("lens rows: no rows for seq %d (of %d rows)", seq, len(rows))
	}
	return byPos, nil
}

// EntropyByLayer draws, for each chosen position, the entropy of the logit-lens readout (nats) against
// the layer it is read from: one curve per position, layer on x. A curve that falls early means the
// model settled on its prediction early in depth.
func EntropyByLayer(rows []LensRow, opts EntropyOptions) (*Figure, error) {
	if len(opts.Positions) == 0 || len(opts.Positions) > MaxCurves {
		return nil, inputError("EntropyByLayer: %d positions chosen, want 1 to %d (EntropyHeatmap shows more)",
			len(opts.Positions), MaxCurves)
	}
	byPos, err := lensBySeq(rows, opts.Seq)
	if err != nil {
		return nil, err
	}
	p := newPlot(opts.title(), "layer", "entropy (nats)")
	p.Legend.Top = true
	p.Y.Min = 0
	for i, pos := range opts.Positions {
		layers := byPos[pos]
		var xys plotter.XYs
		for layer, e := range layers {
			if !math.IsNaN(e) && !math.IsInf(e, 0) {
				xys = append(xys, plotter.XY{X: float64(layer), Y: e})
			}
		}
		if len(xys) == 0 {
			return nil, inputError("EntropyByLayer: seq %d pos %d has no lens rows with an entropy", opts.Seq, pos)
		}
		slices.SortFunc(xys, func(a, b plotter.XY) int { return int(a.X - b.X) })
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("plotting: EntropyByLayer: pos %d: %w", pos, err)
		}
		c := curveColors[i]
		line.Color, line.Width = c, vg.Points(1.5)
		points.Color, points.Shape, points.Radius = c, draw.CircleGlyph{}, vg.Points(2)
		p.Add(line, points)
		p.Legend.Add(opts.label(i, pos), line, points)
	}
	return &Figure{Plot: p, Width: DefaultWidth, Height: DefaultHeight}, nil
}

// EntropyHeatmap draws the logit-lens entropy of one sequence as a heatmap: layer on y (first layer at the
// bottom), position on x, entropy as colour. Cells without a readout are grey.
func EntropyHeatmap(rows []LensRow, opts EntropyOptions) (*Figure, error) {
	byPos, err := lensBySeq(rows, opts.Seq)
	if err != nil {
		return nil, err
	}
	positions := opts.Positions
	if positions == nil {
		for pos := range byPos {
			positions = append(positions, pos)
		}
		slices.Sort(positions)
	}
	layerSet := map[int32]bool{}
	for _, pos := range positions {
		for layer := range byPos[pos] {
			layerSet[layer] = true
		}
	}
	if len(layerSet) == 0 {
		return nil, inputError("EntropyHeatmap: seq %d has no lens rows at the chosen positions", opts.Seq)
	}
	layers := make([]int32, 0, len(layerSet))
	for l := range layerSet {
		layers = append(layers, l)
	}
	slices.Sort(layers)
	z := make([][]float64, len(layers))
	for r, layer := range layers {
		z[r] = make([]float64, len(positions))
		for c, pos := range positions {
			e, ok := byPos[pos][layer]
			if !ok {
				e = nan
			}
			z[r][c] = e
		}
	}
	spec := heatmapSpec{
		title: opts.title(), xLabel: "position", yLabel: "layer", scaleLabel: "entropy (nats)", z: z,
		rowValues: int32sToFloats(layers), colValues: int32sToFloats(positions),
	}
	if len(opts.Labels) > 0 {
		spec.colNames = make([]string, len(positions))
		for i, pos := range positions {
			spec.colNames[i] = opts.label(i, pos)
		}
	}
	return newHeatmap(spec)
}

func int32sToFloats(v []int32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
