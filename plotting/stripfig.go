package plotting

import (
	"fmt"
	"image/color"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The strip as an image: tokens in a monospace font, wrapped to the figure's width, each on a background
// shaded as LogprobStrip shades it (the same red, opacity maxAlpha * surprise/MaxSurprise, here blended
// onto white), and a scale below.
const (
	stripFontSize = vg.Length(10)
	stripLineGap  = vg.Length(5) // between lines of text, so that the shaded boxes of two lines do not touch
	stripPad      = vg.Length(1.5)
	stripScaleH   = vg.Length(34) // the scale at the bottom: bar and labels
)

var (
	stripText  = color.Gray{0x11}
	stripFaint = color.Gray{0x99} // the marks that stand for invisible text: "", \n, \t, <0xE4>, ·
)

// stripBox is one token placed in the strip.
type stripBox struct {
	x, line  int // x in font units of the line (a multiple of the advance), the line number from the top
	text     string
	faint    bool    // the text is a mark (\n for a newline, \t, <0xE4>, "" for an empty token), drawn grey
	surprise float64 // NaN when nothing predicted the token
}

// LogprobStripFigure draws the text of a sequence as an image, each token on a background shaded by its
// surprise (-logprob in nats, read from the row before it; linearly up to opts.MaxSurprise), with the
// colour scale below: the shading of LogprobStrip, as a PNG that every notebook viewer shows. Token text is
// read in the display form the tables hold it in (TokenRow.Token): a newline (the escape \n, or a real
// one) shows as a faint \n before the line break, a tab as a faint \t, a \\ as one backslash, the
// other escapes (\r, \x07, a stray byte's <0xE4>) faint as written; spaces inside a token show as a
// faint ·, an empty token as a faint "" (the bundled font has no ↵ or ∅). Text the bundled font lacks
// (CJK, emoji) shows as boxes: the HTML LogprobStrip shows it, and gives the numbers of each token on
// hover.
func LogprobStripFigure(rows []TokenRow, opts StripOptions) (*Figure, error) {
	opts = opts.withDefaults()
	seq, prevs, err := stripSeq("LogprobStripFigure", rows, opts)
	if err != nil {
		return nil, err
	}
	sty := text.Style{Color: stripText, Font: font.From(font.Font{Typeface: "Liberation", Variant: "Mono"}, stripFontSize),
		Handler: plot.DefaultTextHandler, XAlign: draw.XLeft, YAlign: draw.YBottom}
	advance := sty.Width("M")
	width := DefaultWidth - 2*figureMargin
	perLine := int(width / advance)
	boxes, lines := layoutStrip(seq, prevs, perLine)
	lineH := sty.Height("M") + stripLineGap
	title := fmt.Sprintf("Surprise per token, −log p (seq %d, %d tokens)", opts.Seq, len(seq))
	p := plot.New() // holds the title only; the strip draws itself
	p.Title.Text = title
	titleH := titleSize + vg.Length(10)
	f := &Figure{Plot: p, Width: DefaultWidth, Height: titleH + vg.Length(lines)*lineH + stripScaleH + figureMargin + 8}
	f.custom = func(c draw.Canvas) {
		top := c.Max.Y
		ts := sty
		ts.Font = font.From(plot.DefaultFont, titleSize)
		ts.XAlign, ts.YAlign = draw.XLeft, draw.YTop
		c.FillText(ts, vg.Point{X: c.Min.X, Y: top}, title)
		top -= titleH
		for _, b := range boxes {
			x := c.Min.X + vg.Length(b.x)*advance
			y := top - vg.Length(b.line+1)*lineH + stripLineGap/2
			w := vg.Length(len([]rune(b.text)))*advance - 0.8 // a hairline between tokens of one shade
			if !math.IsNaN(b.surprise) {
				c.FillPolygon(shade(b.surprise, opts.MaxSurprise), []vg.Point{
					{X: x, Y: y - stripPad}, {X: x + w, Y: y - stripPad},
					{X: x + w, Y: y + lineH - stripLineGap + stripPad}, {X: x, Y: y + lineH - stripLineGap + stripPad}})
			}
			bs := sty
			if b.faint {
				bs.Color = stripFaint
				c.FillText(bs, vg.Point{X: x, Y: y}, b.text)
				continue
			}
			// Spaces drawn as a faint middle dot, so that leading and double spaces show.
			runes := []rune(b.text)
			for k, r := range runes {
				s, rs := string(r), bs
				if r == ' ' {
					s, rs.Color = "·", stripFaint
				}
				c.FillText(rs, vg.Point{X: x + vg.Length(k)*advance, Y: y}, s)
			}
		}
		drawStripScale(c, c.Min.Y, opts.MaxSurprise)
	}
	return f, nil
}

// layoutStrip places the tokens of seq (prevs[i] predicted seq[i], as stripSeq returns them) on lines of
// perLine characters, and returns the boxes and the number of lines.
func layoutStrip(seq []TokenRow, prevs []*TokenRow, perLine int) ([]stripBox, int) {
	var boxes []stripBox
	col, line := 0, 0
	for i, r := range seq {
		surprise := nan
		if p := prevs[i]; p != nil && !math.IsNaN(p.Logprob) {
			surprise = -p.Logprob
		}
		// place puts text at the cursor, on the next line when it does not fit, cut across lines when it is
		// longer than one.
		place := func(text string, faint bool) {
			for rs := []rune(text); len(rs) > 0; {
				if col > 0 && col+len(rs) > perLine {
					col, line = 0, line+1
				}
				n := min(len(rs), perLine)
				boxes = append(boxes, stripBox{x: col, line: line, text: string(rs[:n]), faint: faint, surprise: surprise})
				col, rs = col+n, rs[n:]
			}
		}
		if r.Token == "" {
			place(`""`, true)
		}
		for _, s := range pieceSegments(r.Token) {
			switch s.kind {
			case segNewline: // its mark ends the line
				place(`\n`, true)
				col, line = 0, line+1
			case segTab, segMark:
				place(s.text, true)
			default:
				place(s.text, false)
			}
		}
	}
	return boxes, line + 1
}

// shade is the background of a token with this surprise: the HTML strip's rgba(230,50,50,alpha) on white.
func shade(surprise, maxSurprise float64) color.Color {
	alpha := maxAlpha * math.Max(0, math.Min(1, surprise/maxSurprise))
	mix := func(c uint8) uint8 { return uint8(math.Round(255*(1-alpha) + float64(c)*alpha)) }
	return color.RGBA{mix(230), mix(50), mix(50), 0xff}
}

// drawStripScale draws the colour scale, 0 to maxSurprise nats, along the bottom of c.
func drawStripScale(c draw.Canvas, bottom vg.Length, maxSurprise float64) {
	sty := text.Style{Color: color.Gray{0x55}, Font: font.From(plot.DefaultFont, tickSize), Handler: plot.DefaultTextHandler,
		XAlign: draw.XLeft, YAlign: draw.YCenter}
	y := bottom + 12
	label := "surprise −log p:  0"
	c.FillText(sty, vg.Point{X: c.Min.X, Y: y}, label)
	x0 := c.Min.X + sty.Width(label) + 6
	const steps = 60
	barW := vg.Length(150)
	for i := 0; i < steps; i++ {
		s := (float64(i) + 0.5) / steps * maxSurprise
		x := x0 + barW*vg.Length(i)/steps
		c.FillPolygon(shade(s, maxSurprise), []vg.Point{{X: x, Y: y - 4}, {X: x + barW/steps + 0.3, Y: y - 4},
			{X: x + barW/steps + 0.3, Y: y + 4}, {X: x, Y: y + 4}})
	}
	c.FillText(sty, vg.Point{X: x0 + barW + 6, Y: y},
		strconv.FormatFloat(maxSurprise, 'g', 4, 64)+" nats and more · unshaded: no prediction (first token)")
}
