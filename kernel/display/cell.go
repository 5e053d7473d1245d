package display

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Limits on how much of one cell is shown. A hidden-state row is a list of 7,168 floats and a long
// message can be kilobytes: a table is for looking, so cells are cut and say how much was cut.
const (
	maxListItems   = 8   // list elements shown before "… (n)"
	maxStringRunes = 120 // runes of a string shown before "…"
	floatDigits    = 4   // significant digits of a float cell
)

// typeName is a compact spelling of an Arrow type for the table header: list<int32> rather than
// arrow's list<item: int32, nullable>, fixed_size_list<float16>[7168] for a hidden vector.
func typeName(dt arrow.DataType) string {
	switch t := dt.(type) {
	case *arrow.ListType:
		return "list<" + typeName(t.Elem()) + ">"
	case *arrow.LargeListType:
		return "large_list<" + typeName(t.Elem()) + ">"
	case *arrow.ListViewType:
		return "list_view<" + typeName(t.Elem()) + ">"
	case *arrow.FixedSizeListType:
		return fmt.Sprintf("fixed_size_list<%s>[%d]", typeName(t.Elem()), t.Len())
	case *arrow.StructType:
		parts := make([]string, t.NumFields())
		for i, f := range t.Fields() {
			parts[i] = f.Name + ": " + typeName(f.Type)
		}
		return "struct<" + strings.Join(parts, ", ") + ">"
	case *arrow.DictionaryType:
		return "dictionary<" + typeName(t.ValueType) + ">"
	}
	return dt.String()
}

// cellText returns the text of row i of arr, not yet HTML-escaped. Nulls are "null"; the caller styles them.
func cellText(arr arrow.Array, i int) string {
	if arr.IsNull(i) {
		return "null"
	}
	switch a := arr.(type) {
	case *array.Float32:
		return formatFloat(float64(a.Value(i)), 32)
	case *array.Float64:
		return formatFloat(a.Value(i), 64)
	case *array.Float16:
		return formatFloat(float64(a.Value(i).Float32()), 32)
	case *array.String:
		return quoteIfNeeded(a.Value(i))
	case *array.LargeString:
		return quoteIfNeeded(a.Value(i))
	case *array.StringView:
		return quoteIfNeeded(a.Value(i))
	case *array.Binary:
		return formatBytes(a.Value(i))
	case *array.LargeBinary:
		return formatBytes(a.Value(i))
	case array.ListLike:
		return formatList(a, i)
	case *array.Struct:
		return formatStruct(a, i)
	case *array.Dictionary:
		return cellText(a.Dictionary(), a.GetValueIndex(i))
	}
	return arr.ValueStr(i)
}

// formatFloat prints floatDigits significant digits, which is what a reader compares by eye
// (a logprob of -2.303, an entropy of 0.6931); NaN and infinities are spelled out.
func formatFloat(v float64, bits int) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', floatDigits, bits)
}

// quoteIfNeeded shows a string so that what matters in a token piece is visible: a leading space, a
// newline or a tab would vanish in HTML, so control characters are written as Go escapes (\n, \t) and
// long strings are cut. Plain strings are shown as they are; the cell style keeps spaces (white-space: pre).
func quoteIfNeeded(s string) string {
	cut := false
	if utf8.RuneCountInString(s) > maxStringRunes {
		n := 0
		for i := range s {
			if n == maxStringRunes {
				s = s[:i]
				break
			}
			n++
		}
		cut = true
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == utf8.RuneError:
			b.WriteString(`\ufffd`)
		case r < 0x20 || r == 0x7f:
			q := strconv.QuoteRune(r) // '\n' -> `'\n'`
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	if cut {
		b.WriteString("…")
	}
	return b.String()
}

// formatBytes shows the first bytes of a binary value in hex and its length.
func formatBytes(v []byte) string {
	const show = 16
	if len(v) <= show {
		return fmt.Sprintf("0x%x", v)
	}
	return fmt.Sprintf("0x%x… (%d bytes)", v[:show], len(v))
}

// formatList prints [a, b, c] with at most maxListItems elements; a cut list ends "… (n)" with its length.
func formatList(a array.ListLike, i int) string {
	start, end := a.ValueOffsets(i)
	values := a.ListValues()
	n := int(end - start)
	if n > maxListItems && arrow.IsFloating(values.DataType().ID()) {
		return formatVector(values, int(start), n)
	}
	var b strings.Builder
	b.WriteByte('[')
	for k := 0; k < n && k < maxListItems; k++ {
		if k > 0 {
			b.WriteString(", ")
		}
		b.WriteString(cellText(values, int(start)+k))
	}
	if n > maxListItems {
		fmt.Fprintf(&b, ", … (%d)", n)
	}
	b.WriteByte(']')
	return b.String()
}

// formatVector summarises a long float list (a hidden state, 7,168 values on K3) by what tells vectors
// apart at a glance: its length, L2 norm and largest magnitudes with their indices, and how many values
// are exactly zero. Its first elements would say little: the tiny synthetic model's first dimensions are
// zero by construction (replay/synth), which read like a bug.
//
//	[128] ‖x‖₂ 11.39 · largest |x|: [37] 2.113, [90] -1.872, [5] 1.5 · 6 zero
func formatVector(values arrow.Array, start, n int) string {
	var ss float64
	zeros := 0
	type entry struct {
		k int
		v float64
	}
	var top []entry // the three largest |x|, largest first
	for k := 0; k < n; k++ {
		var v float64
		switch a := values.(type) {
		case *array.Float32:
			v = float64(a.Value(start + k))
		case *array.Float64:
			v = a.Value(start + k)
		case *array.Float16:
			v = float64(a.Value(start + k).Float32())
		}
		if values.IsNull(start + k) {
			continue
		}
		ss += v * v
		if v == 0 {
			zeros++
		}
		top = append(top, entry{k, v})
		slices.SortStableFunc(top, func(a, b entry) int {
			if math.Abs(a.v) > math.Abs(b.v) {
				return -1
			}
			if math.Abs(a.v) < math.Abs(b.v) {
				return 1
			}
			return 0
		})
		if len(top) > 3 {
			top = top[:3]
		}
	}
	parts := make([]string, len(top))
	for i, e := range top {
		parts[i] = fmt.Sprintf("[%d] %s", e.k, formatFloat(e.v, 64))
	}
	s := fmt.Sprintf("[%d] ‖x‖₂ %s · largest |x|: %s", n, formatFloat(math.Sqrt(ss), 64), strings.Join(parts, ", "))
	if zeros > 0 {
		s += fmt.Sprintf(" · %d zero", zeros)
	}
	return s
}

// formatStruct prints {name: value, ...}.
func formatStruct(a *array.Struct, i int) string {
	st := a.DataType().(*arrow.StructType)
	var b strings.Builder
	b.WriteByte('{')
	for k := 0; k < a.NumField(); k++ {
		if k > 0 {
			b.WriteString(", ")
		}
		b.WriteString(st.Field(k).Name)
		b.WriteString(": ")
		b.WriteString(cellText(a.Field(k), i))
	}
	b.WriteByte('}')
	return b.String()
}

// cellHTML is the escaped cell with a grey style for nulls; pieces (a token column) are shown as
// quotePiece shows them, list elements too.
func cellHTML(arr arrow.Array, i int, pieces bool) string {
	if arr.IsNull(i) {
		return `<span style="color:#999">null</span>`
	}
	if pieces {
		return html.EscapeString(pieceText(arr, i))
	}
	return html.EscapeString(cellText(arr, i))
}

// pieceText is cellText for a column of token pieces: each string quoted by quotePiece, a list as
// ["␣the", "\n", …].
func pieceText(arr arrow.Array, i int) string {
	switch a := arr.(type) {
	case *array.String:
		return quotePiece(a.Value(i))
	case *array.LargeString:
		return quotePiece(a.Value(i))
	case array.ListLike:
		start, end := a.ValueOffsets(i)
		values := a.ListValues()
		n := int(end - start)
		var b strings.Builder
		b.WriteByte('[')
		for k := 0; k < n && k < maxListItems; k++ {
			if k > 0 {
				b.WriteString(", ")
			}
			if values.IsNull(int(start) + k) {
				b.WriteString("null")
				continue
			}
			b.WriteString(pieceText(values, int(start)+k))
		}
		if n > maxListItems {
			fmt.Fprintf(&b, ", … (%d)", n)
		}
		b.WriteByte(']')
		return b.String()
	}
	return cellText(arr, i)
}

// quotePiece shows a token piece in double quotes with every space as ␣ (a leading space, or two, stay
// visible even where HTML collapses white space, as a sanitised notebook does), control characters as Go
// escapes, a double quote as \", and long pieces cut: "␣the", "\n", "␣␣if".
func quotePiece(s string) string {
	q := quoteIfNeeded(s)
	q = strings.ReplaceAll(q, `"`, `\"`)
	return `"` + strings.ReplaceAll(q, " ", "␣") + `"`
}

// isNumeric says whether a column is right-aligned.
func isNumeric(dt arrow.DataType) bool {
	return arrow.IsInteger(dt.ID()) || arrow.IsFloating(dt.ID())
}
