package display

import (
	"encoding/xml"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/float16"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// testSchema is a small stand-in for the engine's tokens table (which replay/ owns): the column kinds
// that need care when shown (strings with markup and control characters, nullable floats, lists, a
// fixed-size float16 vector).
var testSchema = arrow.NewSchema([]arrow.Field{
	{Name: "pos", Type: arrow.PrimitiveTypes.Int32},
	{Name: "token", Type: arrow.BinaryTypes.String},
	{Name: "logprob", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	{Name: "topk_ids", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
	{Name: "vector", Type: arrow.FixedSizeListOf(3, arrow.FixedWidthTypes.Float16)},
}, nil)

// makeRecord builds n rows of testSchema; row i has token tokens[i%len(tokens)] and i+1 top-k ids.
func makeRecord(t *testing.T, mem memory.Allocator, n int, tokens []string) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(mem, testSchema)
	defer b.Release()
	pos := b.Field(0).(*array.Int32Builder)
	tok := b.Field(1).(*array.StringBuilder)
	lp := b.Field(2).(*array.Float32Builder)
	topk := b.Field(3).(*array.ListBuilder)
	topkv := topk.ValueBuilder().(*array.Int32Builder)
	vec := b.Field(4).(*array.FixedSizeListBuilder)
	vecv := vec.ValueBuilder().(*array.Float16Builder)
	for i := 0; i < n; i++ {
		pos.Append(int32(i))
		tok.Append(tokens[i%len(tokens)])
		if i == n-1 {
			lp.AppendNull() // the last position has no next token
		} else {
			lp.Append(-2.302585 * float32(i+1))
		}
		topk.Append(true)
		for k := 0; k <= i; k++ {
			topkv.Append(int32(100 + k))
		}
		vec.Append(true)
		for k := 0; k < 3; k++ {
			vecv.Append(float16.New(float32(k) / 4))
		}
	}
	return b.NewRecordBatch()
}

// parsed is the part of the rendered HTML the tests look at, read with encoding/xml: the output must be
// well-formed, which also proves every string was escaped.
type parsed struct {
	Head []string   // header cell texts
	Rows [][]string // body cell texts
	Foot string
}

func parse(t *testing.T, s string) parsed {
	t.Helper()
	var doc struct {
		Table struct {
			Head []struct {
				Text string `xml:",chardata"`
				Type string `xml:"span"`
			} `xml:"thead>tr>th"`
			Rows []struct {
				Cells []struct {
					Inner string `xml:",innerxml"`
				} `xml:"td"`
			} `xml:"tbody>tr"`
		} `xml:"div>table"`
		Foot string `xml:"p"`
	}
	if err := xml.Unmarshal([]byte("<div>"+s+"</div>"), &doc); err != nil {
		t.Fatalf("output is not well-formed: %v\n%s", err, s)
	}
	var p parsed
	for _, h := range doc.Table.Head {
		p.Head = append(p.Head, h.Text+" "+h.Type)
	}
	for _, r := range doc.Table.Rows {
		var row []string
		for _, c := range r.Cells { // a string cell's text is in <div align="left"> (see tdStyle)
			inner := c.Inner
			if rest, ok := strings.CutPrefix(inner, `<div align="left">`); ok {
				inner = strings.TrimSuffix(rest, "</div>")
			}
			row = append(row, inner)
		}
		p.Rows = append(p.Rows, row)
	}
	p.Foot = doc.Foot
	return p
}

func TestHTMLTable(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	tokens := []string{"<script>alert('x')</script>", " the", "\n", "a&b"}
	tests := []struct {
		name     string
		n        int
		maxRows  int
		wantRows int
		wantFoot string
	}{
		{"all rows", 4, 10, 4, "4 rows × 5 columns"},
		{"truncated", 30, 5, 5, "30 rows × 5 columns (first 5 shown)"},
		{"default max", 25, 0, DefaultMaxRows, "25 rows × 5 columns (first 20 shown)"},
		{"one row", 1, 3, 1, "1 row × 5 columns"},
		{"empty", 0, 3, 0, "0 rows × 5 columns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := makeRecord(t, mem, tt.n, tokens)
			defer rec.Release()
			got := parse(t, HTMLTable(rec, tt.maxRows))
			wantHead := []string{"pos int32", "token utf8", "logprob float32", "topk_ids list<int32>",
				"vector fixed_size_list<float16>[3]"}
			if strings.Join(got.Head, "|") != strings.Join(wantHead, "|") {
				t.Errorf("header (-want +got):\n-%q\n+%q", wantHead, got.Head)
			}
			if len(got.Rows) != tt.wantRows {
				t.Errorf("rows: want %d, got %d", tt.wantRows, len(got.Rows))
			}
			if got.Foot != tt.wantFoot {
				t.Errorf("footer (-want +got):\n-%q\n+%q", tt.wantFoot, got.Foot)
			}
		})
	}
}

func TestHTMLTableCells(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rec := makeRecord(t, mem, 12, []string{"<b>", " the", "\n\t", "a&b", "héllo 世界"})
	defer rec.Release()
	s := HTMLTable(rec, 12)
	if strings.Contains(s, "<b>") {
		t.Errorf("raw <b> token leaked into the HTML")
	}
	rows := parse(t, s).Rows
	tests := []struct {
		row, col int
		want     string // inner XML of the cell, so escaped
	}{
		{0, 0, "0"},
		{0, 1, "&#34;&lt;b&gt;&#34;"}, // pieces quoted, spaces as ␣
		{1, 1, "&#34;␣the&#34;"},
		{2, 1, `&#34;\n\t&#34;`},
		{3, 1, "&#34;a&amp;b&#34;"},
		{4, 1, "&#34;héllo␣世界&#34;"},
		{0, 2, "-2.303"},
		{1, 2, "-4.605"},
		{11, 2, `<span style="color:#999">null</span>`},
		{0, 3, "[100]"},
		{2, 3, "[100, 101, 102]"},
		{11, 3, "[100, 101, 102, 103, 104, 105, 106, 107, … (12)]"},
		{0, 4, "[0, 0.25, 0.5]"},
	}
	for _, tt := range tests {
		if got := rows[tt.row][tt.col]; got != tt.want {
			t.Errorf("cell (%d, %d): want %q, got %q", tt.row, tt.col, tt.want, got)
		}
	}
}

func TestHTMLRecordsAndTable(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	a := makeRecord(t, mem, 3, []string{"a"})
	defer a.Release()
	b := makeRecord(t, mem, 4, []string{"b"})
	defer b.Release()

	got := parse(t, HTMLRecords([]arrow.RecordBatch{a, b}, 5))
	if want := "7 rows × 5 columns in 2 batches (first 5 shown)"; got.Foot != want {
		t.Errorf("records footer: want %q, got %q", want, got.Foot)
	}
	if len(got.Rows) != 5 || got.Rows[3][1] != "&#34;b&#34;" || got.Rows[2][1] != "&#34;a&#34;" {
		t.Errorf("records rows: want a,a,a,b,b; got %v", got.Rows)
	}

	tbl := array.NewTableFromRecords(testSchema, []arrow.RecordBatch{a, b, a})
	defer tbl.Release()
	got = parse(t, HTMLTableOf(tbl, 6))
	if want := "10 rows × 5 columns (first 6 shown)"; got.Foot != want {
		t.Errorf("table footer: want %q, got %q", want, got.Foot)
	}
	if len(got.Rows) != 6 || got.Rows[5][1] != "&#34;b&#34;" {
		t.Errorf("table rows across chunks: got %v", got.Rows)
	}
}

func TestHTMLBadInput(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	a := makeRecord(t, mem, 2, []string{"a"})
	defer a.Release()
	other := array.NewRecordBuilder(mem, arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil))
	defer other.Release()
	b := other.NewRecordBatch()
	defer b.Release()
	tests := []struct {
		name, got, want string
	}{
		{"nil record", HTMLTable(nil, 3), "no record"},
		{"no records", HTMLRecords(nil, 3), "no records"},
		{"nil in records", HTMLRecords([]arrow.RecordBatch{a, nil}, 3), "record 1 is nil"},
		{"schema mismatch", HTMLRecords([]arrow.RecordBatch{a, b}, 3), "record 1 has schema"},
		{"nil table", HTMLTableOf(nil, 3), "no table"},
	}
	for _, tt := range tests {
		if !strings.Contains(tt.got, tt.want) || !strings.Contains(tt.got, "display: ") {
			t.Errorf("%s: want a note containing %q, got %q", tt.name, tt.want, tt.got)
		}
	}
}

func TestQuoteIfNeeded(t *testing.T) {
	long := strings.Repeat("é", maxStringRunes+5)
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"a\nb", `a\nb`},
		{"\x00\x7f", `\x00\x7f`},
		{"bad \xff byte", `bad \ufffd byte`},
		{long, strings.Repeat("é", maxStringRunes) + "…"},
	}
	for _, tt := range tests {
		if got := quoteIfNeeded(tt.in); got != tt.want {
			t.Errorf("quoteIfNeeded(%q): want %q, got %q", tt.in, tt.want, got)
		}
	}
}

// The columns a researcher reads first come first, top-k beside the token; pieces are quoted with their
// spaces visible, in lists too; strings are left-aligned and a wide table scrolls inside its div.
func TestColumnOrderAndPieces(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "token_id", Type: arrow.PrimitiveTypes.Int32},
		{Name: "topk_ids", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
		{Name: "topk_tokens", Type: arrow.ListOf(arrow.BinaryTypes.String)},
		{Name: "pos", Type: arrow.PrimitiveTypes.Int32},
		{Name: "token", Type: arrow.BinaryTypes.String},
		{Name: "message", Type: arrow.PrimitiveTypes.Int32},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	b.Field(0).(*array.Int32Builder).Append(7)
	ids := b.Field(1).(*array.ListBuilder)
	ids.Append(true)
	ids.ValueBuilder().(*array.Int32Builder).AppendValues([]int32{1, 2}, nil)
	toks := b.Field(2).(*array.ListBuilder)
	toks.Append(true)
	toks.ValueBuilder().(*array.StringBuilder).AppendValues([]string{" the", "\n"}, nil)
	b.Field(3).(*array.Int32Builder).Append(0)
	b.Field(4).(*array.StringBuilder).Append("  if")
	b.Field(5).(*array.Int32Builder).Append(1)
	rec := b.NewRecordBatch()
	defer rec.Release()
	out := HTMLTable(rec, 5)
	got := parse(t, out)
	want := []string{"pos int32", "token utf8", "topk_tokens list<utf8>", "message int32", "token_id int32", "topk_ids list<int32>"}
	if strings.Join(got.Head, "|") != strings.Join(want, "|") {
		t.Errorf("header (-want +got):\n-%q\n+%q", want, got.Head)
	}
	if cells := got.Rows[0]; cells[1] != "&#34;␣␣if&#34;" || cells[2] != `[&#34;␣the&#34;, &#34;\n&#34;]` {
		t.Errorf("pieces: token %q, topk_tokens %q", cells[1], cells[2])
	}
	// Untrusted, Jupyter drops the styles and right-aligns cells: a string's div keeps it left.
	if !strings.Contains(out, `<div align="left">&#34;␣␣if&#34;</div>`) {
		t.Errorf("string cells lack the left-aligned div an untrusted notebook keeps: %.300s", out)
	}
	if !strings.HasPrefix(out, `<div style="overflow-x:auto`) || !strings.Contains(out, "text-align:left") {
		t.Errorf("want the table in a scrolling div, cells left-aligned: %.200s", out)
	}
}

// A long float list shows its length, norm, largest values and zero count, not its first elements.
func TestFormatVector(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := array.NewFloat32Builder(mem)
	defer b.Release()
	vals := make([]float32, 16) // zeros first, as on the tiny model
	vals[9], vals[12], vals[15], vals[3] = 3, -4, 1, 0.5
	b.AppendValues(vals, nil)
	arr := b.NewFloat32Array()
	defer arr.Release()
	got := formatVector(arr, 0, 16)
	want := "[16] ‖x‖₂ 5.123 · largest |x|: [12] -4, [9] 3, [15] 1 · 12 zero"
	if got != want {
		t.Errorf("formatVector:\nwant %q\ngot  %q", want, got)
	}
}
