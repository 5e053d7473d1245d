package plotting

import (
	"image"
	"image/color"
	"image/draw"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
)

// The heatmap shared by the entropy, AttnRes and expert figures: a grid of rows x columns with named
// rows and columns, a colour scale in its own strip, and a grey for cells that have no value.

// A heatmap is drawn as one image with each cell a block of pixels, pre-scaled by whole numbers to about
// targetPixels on each side. Vector cells (one SVG path each) leave hairline seams between cells where
// renderers anti-alias, and 93 layers x 896 experts of paths make a 10 MB SVG; an image scaled up by the
// browser is blurred at the cell edges. A block image at close to its display size avoids all three.
const targetPixels = 720

// cellPixels is how many pixels wide (or high) each of n cells is drawn.
func cellPixels(n int) int {
	return max(1, (targetPixels+n-1)/n)
}

// missingColor fills cells without a value (an AttnRes block that does not exist yet at that layer).
var missingColor = color.RGBA{0xe4, 0xe4, 0xe4, 0xff}

// heatmapSpec is what a heatmap figure needs.
type heatmapSpec struct {
	title, xLabel, yLabel, scaleLabel string
	z                                 [][]float64 // z[row][col]; NaN is a missing cell
	rowNames, colNames                []string    // tick labels; nil for plain numbers
	textCols                          bool        // colNames are text of the user's (token pieces): turned up, one a column
	rowValues, colValues              []float64   // numeric tick values when names are nil; nil for 0..n-1
	// fromZero starts the colour scale at 0 rather than at the smallest value: for counts, where a scale
	// starting near the minimum makes a layer's least used expert look unused.
	fromZero bool
}

// newHeatmap builds the figure. The colour scale spans the finite values; a constant grid is widened by
// ±0.5 so that the scale is not empty (gonum panics on an empty range).
func newHeatmap(s heatmapSpec) (*Figure, error) {
	rows := len(s.z)
	if rows == 0 || len(s.z[0]) == 0 {
		return nil, inputError("%s: no data", s.title)
	}
	cols := len(s.z[0])
	z := s.z
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, row := range z {
		if len(row) != cols {
			return nil, inputError("%s: rows of %d and %d cells", s.title, cols, len(row))
		}
		for _, v := range row {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if lo > hi {
		return nil, inputError("%s: every cell is missing", s.title)
	}
	if s.fromZero && lo > 0 {
		lo = 0
	}
	if lo == hi {
		lo, hi = lo-0.5, hi+0.5
	}
	if math.IsInf(hi-lo, 0) { // finite values whose span is not (±1.7e308): no colour scale can be drawn
		return nil, inputError("%s: the values span %g to %g, more than a colour scale can show", s.title, lo, hi)
	}

	cmap := viridis()
	cmap.SetMin(lo)
	cmap.SetMax(hi)

	p := newPlot(s.title, s.xLabel, s.yLabel)
	p.Add(plotter.NewImage(cellImage(z, cmap), -0.5, -0.5, float64(cols)-0.5, float64(rows)-0.5))
	p.X.Min, p.X.Max = -0.5, float64(cols)-0.5
	p.Y.Min, p.Y.Max = -0.5, float64(rows)-0.5
	p.X.Tick.Marker = indexTicks{names: s.colNames, values: s.colValues, max: 24}
	if s.textCols && s.colNames != nil {
		// Text (token pieces, as EntropyHeatmap's Labels give them) upright overlaps past a couple of
		// dozen columns: turned up, a label is one line high, and every column up to maxTurnedTicks keeps
		// its own. Spaces at either end are drawn as "·", as a piece's leading space would not show.
		p.X.Tick.Label.Rotation = math.Pi / 2
		p.X.Tick.Label.XAlign = text.XRight
		p.X.Tick.Label.YAlign = text.YCenter
		p.X.Tick.Marker = indexTicks{names: visibleEnds(s.colNames), values: s.colValues, max: maxTurnedTicks}
	}
	p.Y.Tick.Marker = indexTicks{names: s.rowNames, values: s.rowValues, max: 30}

	scale := newPlot("", "", s.scaleLabel)
	scale.Add(&plotter.ColorBar{ColorMap: cmap, Vertical: true})
	scale.HideX()
	scale.Y.Padding = 0
	scale.Y.Tick.Marker = LinearTicks{}

	height := DefaultHeight
	if rows > 20 { // give long row lists room for their labels
		height = vg.Length(math.Min(760, 120+11*float64(rows)))
	}
	return &Figure{Plot: p, Width: DefaultWidth, Height: height, scale: scale}, nil
}

// cellImage paints z[r][c] as a block of cellPixels(cols) x cellPixels(rows) pixels, row 0 at the bottom;
// NaN and infinite cells get missingColor.
func cellImage(z [][]float64, cmap palette.ColorMap) *image.RGBA {
	rows, cols := len(z), len(z[0])
	kx, ky := cellPixels(cols), cellPixels(rows)
	img := image.NewRGBA(image.Rect(0, 0, cols*kx, rows*ky))
	for r, row := range z {
		for c, v := range row {
			var col color.Color = missingColor
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				v = math.Max(cmap.Min(), math.Min(cmap.Max(), v))
				if got, err := cmap.At(v); err == nil {
					col = got
				}
			}
			y0 := (rows - 1 - r) * ky // image rows run top to bottom
			draw.Draw(img, image.Rect(c*kx, y0, (c+1)*kx, y0+ky), image.NewUniform(col), image.Point{}, draw.Src)
		}
	}
	return img
}

// maxTurnedTicks is the most turned-up labels a heatmap's x axis shows: a line of the tick font (10 pt)
// each, in the plot area of a figure DefaultWidth wide beside its colour scale.
const maxTurnedTicks = 44

// visibleEnds returns names with the spaces at either end of each drawn as "·".
func visibleEnds(names []string) []string {
	out := make([]string, len(names))
	for i, s := range names {
		core := strings.Trim(s, " ")
		if core == "" {
			out[i] = strings.Repeat("·", len(s))
			continue
		}
		lead := len(s) - len(strings.TrimLeft(s, " "))
		trail := len(s) - len(strings.TrimRight(s, " "))
		out[i] = strings.Repeat("·", lead) + core + strings.Repeat("·", trail)
	}
	return out
}

// indexTicks labels cells 0..n-1 of an axis with names or values, thinned to at most max labels.
type indexTicks struct {
	names  []string
	values []float64
	max    int
}

// Ticks implements plot.Ticker.
func (t indexTicks) Ticks(min, max float64) []plot.Tick {
	n := int(math.Round(max - min))
	step := 1
	for n/step > t.max {
		step++
	}
	// A step of 1, 2, 5, 10, 20, 50 ... reads better than 7 or 13.
	for _, nice := range []int{1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000} {
		if nice >= step {
			step = nice
			break
		}
	}
	var ticks []plot.Tick
	for i := 0; i < n; i++ {
		label := ""
		if i%step == 0 {
			switch {
			case t.names != nil && i < len(t.names):
				label = t.names[i]
			case t.values != nil && i < len(t.values):
				label = formatTick(t.values[i])
			case t.names == nil && t.values == nil:
				label = formatTick(float64(i))
			}
		}
		if label != "" {
			ticks = append(ticks, plot.Tick{Value: float64(i), Label: label})
		}
	}
	return ticks
}

// formatTick writes whole numbers without decimals.
func formatTick(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// viridis is the perceptually uniform sequential colour map of matplotlib (public domain, CC0), built
// from eight of its colours; its luminance rises monotonically, which moreland.NewLuminance requires.
// Unlike maps that end in white, no cell is mistaken for the background.
func viridis() palette.ColorMap {
	controls := []color.Color{
		color.RGBA{0x44, 0x01, 0x54, 0xff}, color.RGBA{0x46, 0x32, 0x7e, 0xff},
		color.RGBA{0x36, 0x5c, 0x8d, 0xff}, color.RGBA{0x27, 0x7f, 0x8e, 0xff},
		color.RGBA{0x1f, 0xa1, 0x87, 0xff}, color.RGBA{0x4a, 0xc1, 0x6d, 0xff},
		color.RGBA{0xa0, 0xda, 0x39, 0xff}, color.RGBA{0xfd, 0xe7, 0x25, 0xff},
	}
	cm, err := moreland.NewLuminance(controls)
	if err != nil {
		return moreland.Kindlmann() // unreachable: the controls above rise in luminance (tested)
	}
	return cm
}
