package plotting

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Alternative is one candidate next token in a top-k figure.
type Alternative struct {
	Label   string  // what the bar is called: the token text, quoted so that spaces show
	Logprob float64 // natural log of its probability, <= 0
	Target  bool    // the token that actually came next; drawn in its own colour
}

// Bar colours: the alternatives in blue, the token that came next in orange.
var (
	barColor    = color.RGBA{0x4e, 0x79, 0xa7, 0xff}
	targetColor = color.RGBA{0xf2, 0x8e, 0x2b, 0xff}
)

// TopK draws alternatives as horizontal bars of probability (exp of the logprob), the first at the top,
// each labelled with its percentage. title may be empty.
func TopK(alts []Alternative, title string) (*Figure, error) {
	if len(alts) == 0 {
		return nil, inputError("TopK: no alternatives")
	}
	if title == "" {
		title = "Top next-token predictions"
	}
	p := newPlot(title, "probability", "")
	n := len(alts)
	for _, a := range alts {
		if a.Target { // said in the axis label: a legend box would cover the shortest bars' labels
			p.X.Label.Text = "probability (orange: the token that came next)"
			break
		}
	}
	names := make([]string, n)
	var labels plotter.XYLabels
	maxP := 0.0
	for i, a := range alts {
		if math.IsNaN(a.Logprob) || a.Logprob > 1e-6 {
			return nil, inputError("TopK: alternative %d (%s): logprob %v, want <= 0", i, a.Label, a.Logprob)
		}
		y := float64(n - 1 - i) // the first alternative at the top
		prob := math.Exp(a.Logprob)
		maxP = math.Max(maxP, prob)
		bar, err := plotter.NewBarChart(plotter.Values{prob}, vg.Length(14))
		if err != nil {
			return nil, fmt.Errorf("plotting: TopK: %w", err)
		}
		bar.Horizontal, bar.XMin = true, y
		bar.Color, bar.LineStyle.Width = barColor, 0
		if a.Target {
			bar.Color = targetColor
		}
		p.Add(bar)
		names[n-1-i] = a.Label
		labels.XYs = append(labels.XYs, plotter.XY{X: prob, Y: y})
		labels.Labels = append(labels.Labels, percent(prob))
		if a.Target {
			// A marker where the bar ends, so that the token that came next shows even where its bar is
			// too short to see (outside the top k, a probability of 0.03% is a bar of a fraction of a pixel).
			mark, err := plotter.NewScatter(plotter.XYs{{X: prob, Y: y}})
			if err != nil {
				return nil, fmt.Errorf("plotting: TopK: %w", err)
			}
			mark.GlyphStyle = draw.GlyphStyle{Color: targetColor, Radius: vg.Points(4), Shape: draw.PyramidGlyph{}}
			p.Add(mark)
		}
	}
	text, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, fmt.Errorf("plotting: TopK: %w", err)
	}
	for i := range text.TextStyle {
		text.TextStyle[i].Font.Size = tickSize
		text.TextStyle[i].YAlign = draw.YCenter
	}
	text.Offset = vg.Point{X: vg.Length(4)}
	p.Add(text)
	p.NominalY(names...)
	p.X.Min, p.X.Max = 0, math.Min(1, maxP*1.2+0.02) // room for the percentages
	height := vg.Length(math.Max(200, 90+24*float64(n)))
	return &Figure{Plot: p, Width: DefaultWidth, Height: height}, nil
}

// percent labels a probability with the digits it needs: 41.3%, 2.5%, 0.034%, 4.2e-06% (never 0.0% for a
// probability that is not 0).
func percent(p float64) string {
	switch pc := 100 * p; {
	case pc == 0:
		return "0%"
	case pc >= 1:
		return fmt.Sprintf("%.1f%%", pc)
	default:
		return fmt.Sprintf("%.2g%%", pc)
	}
}

// TopKAt draws the top-k predictions stored in the tokens row at (seq, pos): what the model expected after
// that token. The token that actually came next is orange; when it is not among the top k it is added as
// a last bar with its rank. decode gives token text for the labels; nil labels them with the table's own
// pieces (topk_tokens, and the token column of the next row for an added target), or by id where the
// table has none.
func TopKAt(rows []TokenRow, seq, pos int32, decode func(int32) string) (*Figure, error) {
	var row *TokenRow
	last := int32(-1) // the sequence's last position, for the message
	for i := range rows {
		if rows[i].SeqID == seq {
			last = max(last, rows[i].Pos)
			if rows[i].Pos == pos {
				row = &rows[i]
				break
			}
		}
	}
	if row == nil && last < 0 {
		return nil, inputError("TopKAt: the tokens rows hold no seq %d", seq)
	}
	if row == nil {
		return nil, inputError("TopKAt: no tokens row for seq %d pos %d: its positions are 0..%d", seq, pos, last)
	}
	if len(row.TopKIDs) == 0 {
		return nil, inputError("TopKAt: seq %d pos %d has no top-k (was the tokens table read without topk_ids?)", seq, pos)
	}
	if len(row.TopKIDs) != len(row.TopKLogprobs) {
		return nil, inputError("TopKAt: seq %d pos %d: %d topk_ids but %d topk_logprobs", seq, pos,
			len(row.TopKIDs), len(row.TopKLogprobs))
	}
	alts := make([]Alternative, len(row.TopKIDs))
	found := false
	for k, id := range row.TopKIDs {
		alts[k] = Alternative{Label: topKLabel(*row, k, decode), Logprob: row.TopKLogprobs[k], Target: id == row.TargetID}
		found = found || alts[k].Target
	}
	if !found && row.TargetID >= 0 && !math.IsNaN(row.Logprob) {
		alts = append(alts, Alternative{
			Label:   fmt.Sprintf("%s (rank %d)", targetLabel(rows, *row, decode), row.Rank),
			Logprob: row.Logprob, Target: true,
		})
	}
	// quotePiece, not %q: the piece is already in the display form, whose \n %q would double to \\n
	title := fmt.Sprintf("Next token after %s (seq %d, pos %d)", quotePiece(row.Token), seq, pos)
	return TopK(alts, title)
}

// targetLabel labels the token that came after row: by decode when given, else by the piece of the next
// row of the sequence (the token column), else by id.
func targetLabel(rows []TokenRow, row TokenRow, decode func(int32) string) string {
	if decode == nil {
		for _, r := range rows {
			if r.SeqID == row.SeqID && r.Pos == row.Pos+1 && r.TokenID == row.TargetID && r.Token != "" {
				return quotePiece(r.Token)
			}
		}
	}
	return tokenLabel(row.TargetID, decode)
}
