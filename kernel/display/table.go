package display

import (
	"fmt"
	"html"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/potato-k3/potato-k3/internal/numtext"
)

// DefaultMaxRows is the number of rows shown when maxRows <= 0.
const DefaultMaxRows = 20

// Inline styles: a notebook output has no stylesheet of ours, and the HTML export of a notebook must
// look the same as the live cell, so every element carries its own style. Jupyter drops style attributes
// from the outputs of a notebook it does not trust (a fresh clone), and its own style sheet right-aligns
// every table cell: a string cell's text sits in a <div align="left">, which the sanitiser keeps and
// which overrides the inherited alignment (seen in Jupyter 6.4; an align attribute on the cell itself
// loses to that style sheet). Untrusted, a wide table wraps instead of scrolling.
const (
	tableStyle = `border-collapse:collapse;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px`
	thStyle    = `border-bottom:2px solid #888;padding:2px 8px;text-align:left;vertical-align:bottom`
	typeStyle  = `color:#888;font-weight:normal`
	tdStyle    = `border-bottom:1px solid #ddd;padding:2px 8px;white-space:pre`
	// wrapStyle makes a table wider than the output scroll inside its cell (the columns read first stay in
	// view) instead of widening the page.
	wrapStyle = `overflow-x:auto;max-width:100%`
	footStyle = `color:#666;font-size:11px;font-family:sans-serif;margin:2px 0 8px 0`
	errStyle  = `color:#b00;font-family:sans-serif`
)

// HTMLTable renders the first maxRows rows of rec as an HTML table: a header with each column's name and
// compact Arrow type, one row per record row, and a footer "N rows × M columns" that says when rows were
// left out. Lists show their first elements and their length, floats four significant digits, strings
// are HTML-escaped with control characters written as \n, \t. maxRows <= 0 means DefaultMaxRows.
// A nil record renders as a short note, never a panic.
func HTMLTable(rec arrow.RecordBatch, maxRows int) string {
	if rec == nil {
		return errorHTML("no record (nil)")
	}
	return renderBatches(rec.Schema(), []arrow.RecordBatch{rec}, maxRows)
}

// HTMLRecords renders several record batches of one schema as a single table, as HTMLTable does for one.
// The footer counts the rows of all batches. Batches whose schema differs from the first are not mixed
// in: the output then says which batch differs instead of showing a table.
func HTMLRecords(recs []arrow.RecordBatch, maxRows int) string {
	if len(recs) == 0 {
		return errorHTML("no records")
	}
	for i, r := range recs {
		if r == nil {
			return errorHTML(fmt.Sprintf("record %d is nil", i))
		}
		if !r.Schema().Equal(recs[0].Schema()) {
			return errorHTML(fmt.Sprintf("record %d has schema %s, record 0 has %s; render them separately",
				i, r.Schema(), recs[0].Schema()))
		}
	}
	return renderBatches(recs[0].Schema(), recs, maxRows)
}

// HTMLTableOf renders an arrow.Table as HTMLTable renders a record: its chunks are read in order.
func HTMLTableOf(tbl arrow.Table, maxRows int) string {
	if tbl == nil {
		return errorHTML("no table (nil)")
	}
	if maxRows <= 0 {
		maxRows = DefaultMaxRows
	}
	// Only the chunks that hold the shown rows are read; the row count comes from the table itself.
	tr := array.NewTableReader(tbl, int64(maxRows))
	defer tr.Release()
	// A batch from the reader ends at the nearest chunk boundary, so keep reading until enough rows.
	var recs []arrow.RecordBatch
	for got := int64(0); got < int64(maxRows) && tr.Next(); {
		rec := tr.RecordBatch()
		rec.Retain()
		defer rec.Release()
		recs = append(recs, rec)
		got += rec.NumRows()
	}
	return render(tbl.Schema(), recs, tbl.NumRows(), 0, maxRows)
}

// renderBatches counts the rows of recs and renders them.
func renderBatches(schema *arrow.Schema, recs []arrow.RecordBatch, maxRows int) string {
	if maxRows <= 0 {
		maxRows = DefaultMaxRows
	}
	var total int64
	for _, r := range recs {
		total += r.NumRows()
	}
	batches := 0
	if len(recs) > 1 {
		batches = len(recs)
	}
	return render(schema, recs, total, batches, maxRows)
}

// render writes the table: the header from schema, up to maxRows rows taken from recs in order, and a
// footer with total rows (and the batch count when batches > 0).
func render(schema *arrow.Schema, recs []arrow.RecordBatch, total int64, batches, maxRows int) string {
	var b strings.Builder
	order := columnOrder(schema)
	fmt.Fprintf(&b, `<div style="%s"><table style="%s">`, wrapStyle, tableStyle)
	b.WriteString("<thead><tr>")
	for _, c := range order {
		f := schema.Field(c)
		fmt.Fprintf(&b, `<th style="%s">%s<br/><span style="%s">%s</span></th>`,
			thStyle, html.EscapeString(f.Name), typeStyle, html.EscapeString(typeName(f.Type)))
	}
	b.WriteString("</tr></thead>\n<tbody>\n")
	shown := 0
	for _, rec := range recs {
		for i := 0; i < int(rec.NumRows()) && shown < maxRows; i++ {
			b.WriteString("<tr>")
			for _, c := range order {
				col := rec.Column(c)
				text := cellHTML(col, i, pieceColumn(schema.Field(c).Name))
				if isNumeric(col.DataType()) {
					fmt.Fprintf(&b, `<td style="%s;text-align:right">%s</td>`, tdStyle, text)
				} else {
					fmt.Fprintf(&b, `<td style="%s;text-align:left"><div align="left">%s</div></td>`, tdStyle, text)
				}
			}
			b.WriteString("</tr>\n")
			shown++
		}
	}
	b.WriteString("</tbody></table></div>\n")
	fmt.Fprintf(&b, `<p style="%s">%s</p>`, footStyle, footer(total, len(schema.Fields()), shown, batches))
	return b.String()
}

// firstColumns are the columns a researcher reads first, in the order shown: where a row is, the token,
// how the model scored the next one, and the alternatives beside it; the ids and the rest follow. Columns
// not named here keep the schema's order after these.
var firstColumns = []string{"seq_id", "pos", "layer", "site", "token", "logprob", "target_logprob", "rank", "target_rank",
	"topk_tokens", "topk_logprobs", "entropy", "channel", "message"}

// columnOrder is the order render shows schema's columns in: firstColumns, then the others as they are.
func columnOrder(schema *arrow.Schema) []int {
	var order []int
	for _, name := range firstColumns {
		if idx := schema.FieldIndices(name); len(idx) > 0 {
			order = append(order, idx[0])
		}
	}
	for i := range schema.Fields() {
		if !slices.Contains(order, i) {
			order = append(order, i)
		}
	}
	return order
}

// pieceColumn says whether a column holds token pieces (token, topk_tokens): they are shown quoted with
// their spaces visible, since a leading space is half of what a piece says.
func pieceColumn(name string) bool {
	return name == "token" || name == "topk_tokens" || name == "piece"
}

// footer is "N rows × M columns", with "(first K shown)" when rows were left out and "in B batches".
func footer(total int64, cols, shown, batches int) string {
	s := fmt.Sprintf("%s × %s", numtext.Count(total, "row"), numtext.Count(int64(cols), "column"))
	if batches > 0 {
		s += fmt.Sprintf(" in %d batches", batches)
	}
	if int64(shown) < total {
		s += fmt.Sprintf(" (first %d shown)", shown)
	}
	return s
}

// errorHTML is a visible note in place of a table: a display call in a notebook should show what is
// wrong rather than fail the cell.
func errorHTML(msg string) string {
	return fmt.Sprintf(`<p style="%s">display: %s</p>`, errStyle, html.EscapeString(msg))
}
