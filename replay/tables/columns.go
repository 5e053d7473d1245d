package tables

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/x448/float16"
)

// Typed, checked access to the columns of a record by name, for the readers that turn tables back into
// results. They accept what other Arrow tools write for the same data (polars writes large_string and
// large_list; DuckDB may write string_view) and fail with the table, the column and what was found.

// findColumn returns the column called name, or an error listing the columns the record has.
func findColumn(rec arrow.RecordBatch, table, name string) (arrow.Array, error) {
	idx := rec.Schema().FieldIndices(name)
	if len(idx) == 0 {
		have := make([]string, rec.Schema().NumFields())
		for i, f := range rec.Schema().Fields() {
			have[i] = f.Name
		}
		return nil, fmt.Errorf("tables: %s: missing column %q (have %s)", table, name, strings.Join(have, ", "))
	}
	return rec.Column(idx[0]), nil
}

// wrongType is the error for a column of an unexpected type.
func wrongType(table, name, want string, got arrow.DataType) error {
	return fmt.Errorf("tables: %s: column %q: want %s, got %s", table, name, want, got)
}

// int32Column returns column name as int32s. Unless nullable, a null in it is an error.
func int32Column(rec arrow.RecordBatch, table, name string, nullable bool) (*array.Int32, error) {
	col, err := findColumn(rec, table, name)
	if err != nil {
		return nil, err
	}
	a, ok := col.(*array.Int32)
	if !ok {
		return nil, wrongType(table, name, "int32", col.DataType())
	}
	return a, noNulls(a, table, name, nullable)
}

// float32Column returns column name as float32s. Unless nullable, a null in it is an error.
func float32Column(rec arrow.RecordBatch, table, name string, nullable bool) (*array.Float32, error) {
	col, err := findColumn(rec, table, name)
	if err != nil {
		return nil, err
	}
	a, ok := col.(*array.Float32)
	if !ok {
		return nil, wrongType(table, name, "float32", col.DataType())
	}
	return a, noNulls(a, table, name, nullable)
}

// stringArray is what string, large_string and string_view arrays share.
type stringArray interface {
	arrow.Array
	Value(i int) string
}

// stringColumn returns column name as strings (utf8, large_utf8 or utf8_view); a null is an error.
func stringColumn(rec arrow.RecordBatch, table, name string) (stringArray, error) {
	col, err := findColumn(rec, table, name)
	if err != nil {
		return nil, err
	}
	switch col.DataType().ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW:
	default:
		return nil, wrongType(table, name, "utf8", col.DataType())
	}
	a := col.(stringArray)
	return a, noNulls(a, table, name, false)
}

// int32Lists is a list<int32> column read row by row.
type int32Lists struct {
	lists array.ListLike
	vals  []int32
}

// Row returns a copy of row i, so that results outlive the records; an empty list gives an empty slice.
func (c int32Lists) Row(i int) []int32 {
	s, e := c.lists.ValueOffsets(i)
	return append([]int32{}, c.vals[s:e]...)
}

// float32Lists is a list<float32> (or fixed_size_list<float16>, widened exactly) column read row by row.
type float32Lists struct {
	lists array.ListLike
	vals  []float32
}

// Row returns a copy of row i.
func (c float32Lists) Row(i int) []float32 {
	s, e := c.lists.ValueOffsets(i)
	return append([]float32{}, c.vals[s:e]...)
}

// listColumn returns column name as a list-like array (list, large_list or fixed_size_list) with non-null
// rows and non-null elements of type elem.
func listColumn(rec arrow.RecordBatch, table, name string, elem ...arrow.Type) (array.ListLike, error) {
	col, err := findColumn(rec, table, name)
	if err != nil {
		return nil, err
	}
	want := "list<" + strings.ToLower(elem[0].String()) + ">"
	l, ok := col.(array.ListLike)
	if !ok {
		return nil, wrongType(table, name, want, col.DataType())
	}
	vals := l.ListValues()
	okElem := false
	for _, e := range elem {
		okElem = okElem || vals.DataType().ID() == e
	}
	if !okElem {
		return nil, wrongType(table, name, want, col.DataType())
	}
	if err := noNulls(l, table, name, false); err != nil {
		return nil, err
	}
	if vals.NullN() > 0 {
		return nil, fmt.Errorf("tables: %s: column %q: %d null list elements", table, name, vals.NullN())
	}
	return l, nil
}

// int32ListColumn returns column name as list<int32>.
func int32ListColumn(rec arrow.RecordBatch, table, name string) (int32Lists, error) {
	l, err := listColumn(rec, table, name, arrow.INT32)
	if err != nil {
		return int32Lists{}, err
	}
	return int32Lists{l, l.ListValues().(*array.Int32).Int32Values()}, nil
}

// float32ListColumn returns column name as list<float32>; float16 elements (the hidden table on request)
// are widened to float32, which is exact.
func float32ListColumn(rec arrow.RecordBatch, table, name string) (float32Lists, error) {
	l, err := listColumn(rec, table, name, arrow.FLOAT32, arrow.FLOAT16)
	if err != nil {
		return float32Lists{}, err
	}
	switch v := l.ListValues().(type) {
	case *array.Float32:
		return float32Lists{l, v.Float32Values()}, nil
	case *array.Float16:
		half := v.Values()
		wide := make([]float32, len(half))
		for i, h := range half {
			wide[i] = float16.Frombits(h.Uint16()).Float32()
		}
		return float32Lists{l, wide}, nil
	}
	return float32Lists{}, wrongType(table, name, "list<float32>", l.DataType())
}

// checkPieceLists checks the topk_tokens column of rec against its topk_ids. A record without the column
// (written before schema version 2, such as an older server's spilled Parquet) passes; with it, every row
// must be a list of strings that is empty (the builder had no tokenizer) or as long as the row's topk_ids.
// The pieces are not read back: a Result has no place for them, and Build names the ids again.
func checkPieceLists(rec arrow.RecordBatch, table string, ids int32Lists) error {
	const name = "topk_tokens"
	if len(rec.Schema().FieldIndices(name)) == 0 {
		return nil
	}
	l, err := listColumn(rec, table, name, arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW)
	if err != nil {
		return err
	}
	for i := 0; i < l.Len(); i++ {
		s, e := l.ValueOffsets(i)
		is, ie := ids.lists.ValueOffsets(i)
		if e != s && e-s != ie-is {
			return fmt.Errorf("tables: %s: column %q: row %d: %d pieces for %d topk_ids", table, name, i, e-s, ie-is)
		}
	}
	return nil
}

// noNulls fails when a must not hold nulls but does, naming the first null row.
func noNulls(a arrow.Array, table, name string, nullable bool) error {
	if nullable || a.NullN() == 0 {
		return nil
	}
	for i := 0; i < a.Len(); i++ {
		if a.IsNull(i) {
			return fmt.Errorf("tables: %s: column %q: null at row %d", table, name, i)
		}
	}
	return nil
}
