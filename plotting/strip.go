package plotting

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strconv"
	"strings"
)

// StripOptions chooses what LogprobStrip shows.
type StripOptions struct {
	Seq int32 // the sequence (seq_id)
	// Decode gives the text of a token id, for the alternatives in the tooltips; nil names them by the
	// table's topk_tokens pieces (TokenRow.TopKTokens), or shows ids as #123 where a row has none.
	Decode func(id int32) string
	// MaxSurprise is the surprise (nats) shaded fully; larger ones are shaded the same. Default 10.
	MaxSurprise float64
	// TopK is how many alternatives a tooltip lists; default 5.
	TopK int
}

// Shading of the strip: a token is drawn on red with opacity maxAlpha * surprise/MaxSurprise; the cap
// keeps black text readable on the darkest shade.
const (
	defaultMaxSurprise = 10.0
	defaultStripTopK   = 5
	shadeRGB           = "230,50,50"
	maxAlpha           = 0.8
)

// LogprobStrip renders a sequence as HTML text in which each token's background is shaded by its surprise,
// -logprob in nats, the darker the more surprising (linearly up to MaxSurprise); hovering a token shows its logprob, probability, rank,
// the entropy of the prediction and the top alternatives. Token text is HTML-escaped and read in the
// display form the tables hold it in (TokenRow.Token): a newline shows as a faint ↵ and breaks the line, a
// tab as a faint →, \\ as one backslash, a stray byte as a faint <0xE4>, an empty token as a faint ∅.
//
// The surprise of token p is read from row p-1 (its target is token p), so the first token has none and
// is drawn unshaded; a row whose target_id is not the next row's token_id is an error (rows from two
// different sequences, or a broken table). Each span carries data-pos and, when shaded, data-surprise.
func LogprobStrip(rows []TokenRow, opts StripOptions) (string, error) {
	opts = opts.withDefaults()
	seq, prevs, err := stripSeq("LogprobStrip", rows, opts)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(`<div style="font-family:ui-monospace,Menlo,Consolas,monospace;font-size:13px;line-height:1.9;` +
		`white-space:pre-wrap;word-break:break-word;max-width:780px">`)
	for i, r := range seq {
		writeToken(&b, r, prevs[i], opts)
	}
	b.WriteString("</div>\n")
	fmt.Fprintf(&b, `<div style="font-family:sans-serif;font-size:11px;color:#555">surprise −log p: 0 `+
		`<span style="display:inline-block;width:120px;height:9px;vertical-align:middle;`+
		`background:linear-gradient(to right,rgba(%s,0),rgba(%s,%g))"></span> %s nats and more</div>`,
		shadeRGB, shadeRGB, maxAlpha, strconv.FormatFloat(opts.MaxSurprise, 'g', 4, 64))
	return b.String(), nil
}

// withDefaults fills in the defaults of unset options.
func (o StripOptions) withDefaults() StripOptions {
	if !(o.MaxSurprise > 0) || math.IsInf(o.MaxSurprise, 0) { // NaN, 0, negative or infinite: unset
		o.MaxSurprise = defaultMaxSurprise
	}
	if o.TopK <= 0 {
		o.TopK = defaultStripTopK
	}
	return o
}

// stripSeq returns the rows of opts.Seq by position and, for each, the row that predicted it (nil for the
// first token and after a gap). what names the caller in errors.
func stripSeq(what string, rows []TokenRow, opts StripOptions) ([]TokenRow, []*TokenRow, error) {
	seq := make([]TokenRow, 0, len(rows))
	for _, r := range rows {
		if r.SeqID == opts.Seq {
			seq = append(seq, r)
		}
	}
	if len(seq) == 0 {
		return nil, nil, inputError("%s: no rows for seq %d (of %d rows)", what, opts.Seq, len(rows))
	}
	slices.SortFunc(seq, func(a, b TokenRow) int { return int(a.Pos) - int(b.Pos) })
	prevs := make([]*TokenRow, len(seq))
	for i := 1; i < len(seq); i++ {
		if seq[i].Pos == seq[i-1].Pos {
			return nil, nil, inputError("%s: seq %d pos %d appears twice", what, opts.Seq, seq[i].Pos)
		}
		if seq[i-1].Pos == seq[i].Pos-1 {
			prevs[i] = &seq[i-1]
			if prevs[i].TargetID != seq[i].TokenID {
				return nil, nil, inputError("%s: seq %d pos %d: target_id %d but the next token_id is %d",
					what, opts.Seq, prevs[i].Pos, prevs[i].TargetID, seq[i].TokenID)
			}
		}
	}
	return seq, prevs, nil
}

// writeToken writes one token's span; prev is the row that predicted it, nil when there is none.
func writeToken(b *strings.Builder, r TokenRow, prev *TokenRow, opts StripOptions) {
	text := stripHTML(r.Token)
	tip := fmt.Sprintf("pos %d · token %s (#%d)", r.Pos, quotePiece(r.Token), r.TokenID)
	if prev == nil || math.IsNaN(prev.Logprob) {
		fmt.Fprintf(b, `<span data-pos="%d" title="%s">%s</span>`, r.Pos, html.EscapeString(tip+"\nno prediction"), text)
		return
	}
	surprise := -prev.Logprob
	alpha := maxAlpha * math.Max(0, math.Min(1, surprise/opts.MaxSurprise))
	tip += fmt.Sprintf("\nlogprob %.3f (p = %.3g) · rank %d", prev.Logprob, math.Exp(prev.Logprob), prev.Rank)
	if !math.IsNaN(prev.Entropy) {
		tip += fmt.Sprintf("\nentropy %.3f nats", prev.Entropy)
	}
	if alts := alternatives(*prev, opts); alts != "" {
		tip += "\ntop: " + alts
	}
	fmt.Fprintf(b, `<span data-pos="%d" data-surprise="%.4f" title="%s" style="background:rgba(%s,%.3f);border-radius:2px">%s</span>`,
		r.Pos, surprise, html.EscapeString(tip), shadeRGB, alpha, text)
}

// stripHTML is the HTML of a token's text in the strip. The piece is in the display form (piece.go): a
// \n escape shows as a faint ↵ and breaks the line (the strip keeps white space, so a real newline
// breaks it), a tab as a faint → and a real tab, other escapes faint as written, \\ as one backslash,
// and an empty token as a faint ∅.
func stripHTML(piece string) string {
	if piece == "" {
		return faintHTML("∅")
	}
	var b strings.Builder
	for _, s := range pieceSegments(piece) {
		switch s.kind {
		case segNewline:
			b.WriteString(faintHTML("↵") + "\n")
		case segTab:
			b.WriteString(faintHTML("→") + "\t")
		case segMark:
			b.WriteString(faintHTML(html.EscapeString(s.text)))
		default:
			b.WriteString(html.EscapeString(s.text))
		}
	}
	return b.String()
}

// faintHTML wraps HTML in the grey of the marks that stand for invisible text.
func faintHTML(s string) string { return `<span style="color:#aaa">` + s + `</span>` }

// alternatives lists the first opts.TopK predictions of r as 'text' logprob, ...
func alternatives(r TokenRow, opts StripOptions) string {
	var parts []string
	for k := 0; k < len(r.TopKIDs) && k < opts.TopK; k++ {
		parts = append(parts, fmt.Sprintf("%s %.2f", topKLabel(r, k, opts.Decode), r.TopKLogprobs[k]))
	}
	return strings.Join(parts, ", ")
}

// tokenLabel is the quoted text of id (so that spaces and newlines show), or #id without a decoder.
func tokenLabel(id int32, decode func(int32) string) string {
	if decode == nil {
		return fmt.Sprintf("#%d", id)
	}
	return strconv.Quote(decode(id))
}

// topKLabel labels r's k-th alternative: by decode when given, else by the row's piece from the table
// (topk_tokens), else by id.
func topKLabel(r TokenRow, k int, decode func(int32) string) string {
	if decode == nil && len(r.TopKTokens) == len(r.TopKIDs) {
		return quotePiece(r.TopKTokens[k])
	}
	return tokenLabel(r.TopKIDs[k], decode)
}
