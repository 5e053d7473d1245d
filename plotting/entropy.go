package plotting

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"

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
	// default is "pos N". Labels without Positions label positions 0, 1, 2 ... The readout at position p
	// is the distribution of the token at p+1, read after the token at p: a label such as
	// `" b" → "an"` (the token read, then the one it predicts) says which. EntropyHeatmap turns its labels
	// up, one a column up to 44 columns, with spaces at either end drawn as "·".
	Labels []string
	// Title defaults to "Logit-lens entropy by layer (seq N)" for EntropyByLayer and "Logit-lens entropy,
	// layer by position (seq N)" for EntropyHeatmap.
	Title string
	// Curves, for EntropyByLayer, are the (sequence, position) pairs drawn, in place of Seq and Positions:
	// positions of several sequences in one figure. A Curve without a Label is called "seq S pos P".
	Curves []Curve
	// Vocab, when > 0, draws the entropy of the uniform distribution over the vocabulary, ln Vocab, as a
	// dashed reference line: the most a next-token entropy can be (Info.Vocab gives it).
	Vocab int
}

// Curve is one curve of EntropyByLayer: a position of a sequence.
type Curve struct {
	Seq, Pos int32
	Label    string
}

// label is the name of position pos, the i-th chosen.
func (o EntropyOptions) label(i int, pos int32) string {
	if i < len(o.Labels) {
		return o.Labels[i]
	}
	return fmt.Sprintf("pos %d", pos)
}

// title is o.Title, else the default of what: "by layer" (EntropyByLayer) or "layer by position"
// (EntropyHeatmap).
func (o EntropyOptions) title(what string) string {
	if o.Title != "" {
		return o.Title
	}
	if what == "by layer" {
		return fmt.Sprintf("Logit-lens entropy by layer (seq %d)", o.Seq)
	}
	return fmt.Sprintf("Logit-lens entropy, %s (seq %d)", what, o.Seq)
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
// the layer it is read from: one curve per position, layer on x (every layer labelled while they fit), the
// legend below the axes so that it covers no curve, and ln V for reference when opts.Vocab is set. A
// curve that falls early means the model settled on its prediction early in depth. opts.Curves picks
// positions of several sequences; otherwise opts.Positions of opts.Seq.
func EntropyByLayer(rows []LensRow, opts EntropyOptions) (*Figure, error) {
	curves := opts.Curves
	if len(curves) == 0 {
		for i, pos := range opts.Positions {
			curves = append(curves, Curve{Seq: opts.Seq, Pos: pos, Label: opts.label(i, pos)})
		}
	} else if opts.Title == "" {
		opts.Title = "Logit-lens entropy by layer"
	}
	if len(curves) == 0 || len(curves) > MaxCurves {
		return nil, inputError("EntropyByLayer: %d positions chosen, want 1 to %d (EntropyHeatmap shows more)",
			len(curves), MaxCurves)
	}
	bySeq := map[int32]map[int32]map[int32]float64{}
	for _, cv := range curves {
		if bySeq[cv.Seq] != nil {
			continue
		}
		byPos, err := lensBySeq(rows, cv.Seq)
		if err != nil {
			return nil, err
		}
		bySeq[cv.Seq] = byPos
	}
	p := newPlot(opts.title("by layer"), "layer", "entropy (nats)")
	p.Y.Min = 0
	legend := plot.NewLegend()
	legend.TextStyle.Font.Size = tickSize
	legend.Top, legend.Left = true, true
	legend.Padding = vg.Points(4)
	minLayer, maxLayer := math.Inf(1), math.Inf(-1)
	for i, cv := range curves {
		layers := bySeq[cv.Seq][cv.Pos]
		var xys plotter.XYs
		for layer, e := range layers {
			if !math.IsNaN(e) && !math.IsInf(e, 0) {
				xys = append(xys, plotter.XY{X: float64(layer), Y: e})
			}
		}
		if len(xys) == 0 {
			return nil, inputError("EntropyByLayer: seq %d pos %d has no lens rows with an entropy", cv.Seq, cv.Pos)
		}
		slices.SortFunc(xys, func(a, b plotter.XY) int { return int(a.X - b.X) })
		minLayer, maxLayer = math.Min(minLayer, xys[0].X), math.Max(maxLayer, xys[len(xys)-1].X)
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("plotting: EntropyByLayer: pos %d: %w", cv.Pos, err)
		}
		c := curveColors[i]
		line.Color, line.Width = c, vg.Points(1.5)
		points.Color, points.Shape, points.Radius = c, draw.CircleGlyph{}, vg.Points(2)
		p.Add(line, points)
		label := cv.Label
		if label == "" {
			label = fmt.Sprintf("seq %d pos %d", cv.Seq, cv.Pos)
		}
		legend.Add(label, line, points)
	}
	if opts.Vocab > 1 {
		lnV := math.Log(float64(opts.Vocab))
		ref, err := plotter.NewLine(plotter.XYs{{X: minLayer, Y: lnV}, {X: maxLayer, Y: lnV}})
		if err != nil {
			return nil, fmt.Errorf("plotting: EntropyByLayer: %w", err)
		}
		ref.Color, ref.Width, ref.Dashes = color.Gray{0x77}, vg.Points(1), []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(ref)
		legend.Add(fmt.Sprintf("ln V = %.2f: uniform over the %s-token vocabulary, the largest entropy", lnV, thousands(opts.Vocab)), ref)
		p.Y.Max = math.Max(p.Y.Max, lnV*1.04)
	}
	p.X.Tick.Marker = LayerTicks{}
	p.Y.Tick.Marker = LinearTicks{}
	p.X.Min, p.X.Max = minLayer-0.3, maxLayer+0.3
	rowH := tickSize*1.2 + legend.Padding
	entries := len(curves)
	if opts.Vocab > 1 {
		entries++
	}
	legendH := vg.Length(entries)*rowH + 6
	f := &Figure{Plot: p, Width: DefaultWidth, Height: DefaultHeight + legendH}
	f.custom = func(c draw.Canvas) {
		p.Draw(draw.Crop(c, 0, 0, legendH, 0))
		legend.YOffs = 0
		legend.Draw(draw.Crop(c, vg.Length(40), 0, 0, -(c.Max.Y - c.Min.Y - legendH)))
	}
	return f, nil
}

// thousands writes 3328 as 3,328.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
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
		title: opts.title("layer by position"), xLabel: "position", yLabel: "layer", scaleLabel: "entropy (nats)", z: z,
		rowValues: int32sToFloats(layers), colValues: int32sToFloats(positions),
	}
	if len(opts.Labels) > 0 {
		spec.textCols = true
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
