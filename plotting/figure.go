package plotting

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// ErrInput is matched (errors.Is) by the errors about data a plot cannot be drawn from: nothing selected,
// lengths that disagree, values out of range. Column errors match ErrColumn instead.
var ErrInput = errors.New("plotting: bad input")

// inputError makes an ErrInput error with a formatted message.
func inputError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInput, fmt.Sprintf(format, args...))
}

// Sizes. A notebook output is about 800 px wide; an SVG sized 600 pt is shown at 800 px (1 pt = 4/3 px),
// and a PNG rendered at 96 dpi from 600 pt is 800 px.
const (
	DefaultWidth  = vg.Length(600)
	DefaultHeight = vg.Length(360)
	pngDPI        = 96
	colorBarWidth = vg.Length(60) // the strip at the right of a heatmap for its colour scale
)

// Font sizes chosen to stay readable when the figure is scaled to a notebook's width.
const (
	titleSize = vg.Length(14)
	labelSize = vg.Length(12)
	tickSize  = vg.Length(10)
)

var nan = math.NaN()

// Figure is a finished plot, ready to render as SVG or PNG. Plot is the main gonum plot: change its title,
// axis labels or ranges before rendering if the defaults do not suit. A heatmap also draws its colour
// scale in a strip at the right.
type Figure struct {
	Plot          *plot.Plot
	Width, Height vg.Length
	scale         *plot.Plot // the colour bar of a heatmap; nil for other figures
	// custom draws a figure that is not a gonum plot (LogprobStripFigure) in place of Plot, which then
	// holds only its title.
	custom func(c draw.Canvas)
}

// SVG renders the figure as an SVG document.
func (f *Figure) SVG() ([]byte, error) {
	c := vgsvg.New(f.Width, f.Height)
	if err := f.draw(draw.New(c)); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return nil, fmt.Errorf("plotting: writing SVG: %w", err)
	}
	return fixRasters(b.Bytes()), nil
}

// fixRasters repairs the raster images gonum's SVG canvas embeds (the heatmaps' cells): it writes them
// without preserveAspectRatio, so browsers keep the raster's own aspect and draw it in the middle of its
// axes, and labels PNG data as image/jpg. Stretching to the given box and the right MIME type is what the
// plot meant.
func fixRasters(svg []byte) []byte {
	svg = bytes.ReplaceAll(svg, []byte("<image "), []byte(`<image preserveAspectRatio="none" `))
	// a PNG's base64 always starts with iVBOR (its signature), whatever the label says
	return bytes.ReplaceAll(svg, []byte("data:image/jpg;base64,iVBOR"), []byte("data:image/png;base64,iVBOR"))
}

// PNG renders the figure as a PNG image at 96 dpi (800 px wide at the default width).
func (f *Figure) PNG() ([]byte, error) { return f.pngAt(pngDPI) }

// pngAt renders the figure as a PNG image at dpi dots per inch.
func (f *Figure) pngAt(dpi int) ([]byte, error) {
	c := vgimg.NewWith(vgimg.UseWH(f.Width, f.Height), vgimg.UseDPI(dpi))
	if err := f.draw(draw.New(c)); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&b); err != nil {
		return nil, fmt.Errorf("plotting: writing PNG: %w", err)
	}
	return b.Bytes(), nil
}

// displayDPI is the resolution of the PNG a notebook shows: 1.5 times pngDPI, drawn at pngDPI's size
// (the metadata's width), so that it stays sharp on a high-density screen.
const displayDPI = 3 * pngDPI / 2

// Bundle is what Display sends to the notebook, as Jupyter mime bundle data and metadata: the figure as
// image/png ([]byte, base64 on the wire) at 1.5 times the density, shown at its 96-dpi width, and its
// title as text/plain. A PNG is the one form of a plot that every viewer shows: Jupyter sanitises the
// HTML outputs of a notebook it does not trust (a fresh clone), and so does GitHub's notebook view, so an
// SVG sent as HTML (gonbui.DisplaySvg) collapses into its axis text; Jupyter does not render
// image/svg+xml outputs of an untrusted notebook either, and nbconvert's HTML export strips them.
func (f *Figure) Bundle() (data map[string]any, metadata map[string]any, err error) {
	png, err := f.pngAt(displayDPI)
	if err != nil {
		return nil, nil, err
	}
	w, h := f.Width.Dots(pngDPI), f.Height.Dots(pngDPI)
	return map[string]any{"image/png": png, "text/plain": f.AltText()},
		// map[string]int: GoNB's pipe is gob, which registers that type and not map[string]any
		map[string]any{"image/png": map[string]int{"width": int(math.Round(w)), "height": int(math.Round(h))}}, nil
}

// AltText is the figure's text form, for viewers that show no images: its title.
func (f *Figure) AltText() string {
	if f.Plot != nil && f.Plot.Title.Text != "" {
		return "figure: " + f.Plot.Title.Text
	}
	return "figure"
}

// WriteTo writes the figure as SVG to w.
func (f *Figure) WriteTo(w io.Writer) (int64, error) {
	svg, err := f.SVG()
	if err != nil {
		return 0, err
	}
	n, err := w.Write(svg)
	return int64(n), err
}

// WriteFile writes the figure to path as SVG or PNG, chosen by the extension (.svg or .png).
func (f *Figure) WriteFile(path string) error {
	var data []byte
	var err error
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".svg":
		data, err = f.SVG()
	case ".png":
		data, err = f.PNG()
	default:
		return fmt.Errorf("plotting: %s: unknown extension %q (want .svg or .png)", path, ext)
	}
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("plotting: %w", err)
	}
	return nil
}

// draw draws the figure on c. gonum/plot panics on some inputs (an empty colour range, a degenerate
// axis); a panic comes back as an error so that none leaves this package.
func (f *Figure) draw(c draw.Canvas) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("plotting: drawing %q: %v", f.Plot.Title.Text, p)
		}
	}()
	// A margin all round: gonum sizes the axes with its own font metrics, and a browser drawing the SVG
	// with a wider fallback font would otherwise push the tick labels and the legend past the edges.
	c = draw.Crop(c, figureMargin, -figureMargin, figureMargin/2, -figureMargin/2)
	if f.custom != nil {
		f.custom(c)
		return nil
	}
	if f.scale == nil {
		f.Plot.Draw(c)
		return nil
	}
	width := c.Max.X - c.Min.X
	f.Plot.Draw(draw.Crop(c, 0, -colorBarWidth, 0, 0))
	// Level the colour bar with the heatmap: skip the title (its size plus padding) at the top and the x
	// axis (tick labels, axis label and their padding, measured at these font sizes) at the bottom.
	f.scale.Draw(draw.Crop(c, width-colorBarWidth, 0, vg.Length(37), -(titleSize + f.Plot.Title.Padding + 1)))
	return nil
}

// figureMargin is the blank space left and right of a figure (half of it above and below).
const figureMargin = vg.Length(12)

// newPlot returns a plot with this package's title, label and tick sizes.
func newPlot(title, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = titleSize
	p.Title.Padding = vg.Length(6)
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = labelSize
		a.Tick.Label.Font.Size = tickSize
	}
	p.Legend.TextStyle.Font.Size = tickSize
	return p
}

// curveColors are ten colours told apart easily, also by most colour-blind readers (the Tableau 10 set).
var curveColors = []color.RGBA{
	{0x4e, 0x79, 0xa7, 0xff}, {0xf2, 0x8e, 0x2b, 0xff}, {0xe1, 0x57, 0x59, 0xff}, {0x76, 0xb7, 0xb2, 0xff},
	{0x59, 0xa1, 0x4f, 0xff}, {0xed, 0xc9, 0x48, 0xff}, {0xb0, 0x7a, 0xa1, 0xff}, {0xff, 0x9d, 0xa7, 0xff},
	{0x9c, 0x75, 0x5f, 0xff}, {0xba, 0xb0, 0xac, 0xff},
}
