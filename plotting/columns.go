package plotting

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// This file reads Arrow columns by name into accessors, so that the row readers do not care whether a
// float column is float16, float32 or float64 and every mismatch is reported the same way: the table, the
// column, what it is and what was wanted. The engine's schemas belong to replay/; nothing here defines
// them, it only states what each plot needs.

// ErrColumn is matched (errors.Is) by every error about a missing or mistyped column.
var ErrColumn = errors.New("plotting: bad column")

// columnError names the table (tokens, lens, ...) and column.
func columnError(table, name, format string, args ...any) error {
	return fmt.Errorf("%w: %s table: column %q: %s", ErrColumn, table, name, fmt.Sprintf(format, args...))
}

// askFor is the kernel option that asks the engine for each optional table, for the error of a table
// that is not there.
var askFor = map[string]string{"lens": "kernel.Lens or LensAll", "router": "kernel.Router", "attnres": "kernel.AttnRes"}

// findColumn returns the column called name, or an error listing the columns there are; a nil record (a
// table the result does not hold: kernel's Result.Lens() is nil unless the lens was asked for) is an
// ErrInput error saying so.
func findColumn(rec arrow.RecordBatch, table, name string) (arrow.Array, error) {
	if rec == nil {
		if how, ok := askFor[table]; ok {
			return nil, fmt.Errorf("%w: no %s table (nil): the replay must ask for it (%s)", ErrInput, table, how)
		}
		return nil, fmt.Errorf("%w: no %s table (nil)", ErrInput, table)
	}
	idx := rec.Schema().FieldIndices(name)
	if len(idx) == 0 {
		names := make([]string, rec.Schema().NumFields())
		for i, f := range rec.Schema().Fields() {
			names[i] = f.Name
		}
		return nil, columnError(table, name, "missing (have %s)", strings.Join(names, ", "))
	}
	return rec.Column(idx[0]), nil
}

// Column returns the column called name of rec as the Arrow array type T, for a cell that reads a
// table's columns itself:
//
//	pos, err1 := plotting.Column[*array.Int32](res.Hidden(), "pos")
//	vec, err2 := plotting.Column[*array.FixedSizeList](res.Hidden(), "vector")
//	check(errors.Join(err1, err2))
//
// A missing column, or one of another type, is an error matching ErrColumn that names the table and the
// column and says which columns or which type there are, where a type assertion would panic; a nil rec
// (a table the replay did not ask for) is an error matching ErrInput. The types are those of package
// replay/tables' schemas. The array belongs to rec and is valid while rec is.
func Column[T arrow.Array](rec arrow.RecordBatch, name string) (T, error) {
	var zero T
	if rec == nil {
		return zero, fmt.Errorf("%w: column %q of no table (nil): the replay must ask for the table", ErrInput, name)
	}
	table := "unnamed"
	if md := rec.Schema().Metadata(); md.FindKey("potato.table") >= 0 { // replay/tables' MetaTable, on every table the engine writes
		table = md.Values()[md.FindKey("potato.table")]
	}
	col, err := findColumn(rec, table, name)
	if err != nil {
		return zero, err
	}
	a, ok := col.(T)
	if !ok {
		return zero, columnError(table, name, "is %s (%T), want %T", col.DataType(), col, zero)
	}
	return a, nil
}

// intColumn reads an int32 or int64 column; nulls read as -1 (the engine's "none" for ids and messages).
func intColumn(rec arrow.RecordBatch, table, name string) (func(i int) int32, error) {
	col, err := findColumn(rec, table, name)
	if err != nil {
		return nil, err
	}
	switch a := col.(type) {
	case *array.Int32:
		return func(i int) int32 {
			if a.IsNull(i) {
				return -1
			}
			return a.Value(i)
		}, nil
	case *array.Int64:
		return func(i int) int32 {
			if a.IsNull(i) {
				return -1
			}
			return int32(a.Value(i))
		}, nil
	}
	return nil, columnError(table, name, "is %s, want int32", col.DataType())
}

// floatColumn reads a float16, float32 or float64 column; nulls read as NaN.
func floatColumn(rec arrow.RecordBatch, table, name string) (func(i int) float64, error) {
	col, err := findColumn(rec, table, name)
	if err != nil {
		return nil, err
	}
	f, ok := floatAt(col)
	if !ok {
		return nil, columnError(table, name, "is %s, want float32", col.DataType())
	}
	return f, nil
}

// floatAt returns an accessor for a floating-point array, ok false for other types.
func floatAt(col arrow.Array) (func(i int) float64, bool) {
	nan := math.NaN()
	switch a := col.(type) {
	case *array.Float32:
		return func(i int) float64 {
			if a.IsNull(i) {
				return nan
			}
			return float64(a.Value(i))
		}, true
	case *array.Float64:
		return func(i int) float64 {
			if a.IsNull(i) {
				return nan
			}
			return a.Value(i)
		}, true
	case *array.Float16:
		return func(i int) float64 {
			if a.IsNull(i) {
				return nan
			}
			return float64(a.Value(i).Float32())
		}, true
	}
	return nil, false
}

// stringColumn reads a utf8 column; nulls read as "".
func stringColumn(rec arrow.RecordBatch, table, name string) (func(i int) string, error) {
	col, err := findColumn(rec, table, name)
	if err != nil {
		return nil, err
	}
	switch a := col.(type) {
	case *array.String:
		return a.Value, nil
	case *array.LargeString:
		return a.Value, nil
	case *array.StringView:
		return a.Value, nil
	}
	return nil, columnError(table, name, "is %s, want utf8", col.DataType())
}

// listColumn checks that name is a list (of any length kind) and returns it with its values array.
func listColumn(rec arrow.RecordBatch, table, name, want string) (array.ListLike, arrow.Array, error) {
	col, err := findColumn(rec, table, name)
	if err != nil {
		return nil, nil, err
	}
	l, ok := col.(array.ListLike)
	if !ok {
		return nil, nil, columnError(table, name, "is %s, want %s", col.DataType(), want)
	}
	return l, l.ListValues(), nil
}

// intListColumn reads a list<int32> column; a null list reads as empty.
func intListColumn(rec arrow.RecordBatch, table, name string) (func(i int) []int32, error) {
	l, values, err := listColumn(rec, table, name, "list<int32>")
	if err != nil {
		return nil, err
	}
	v, ok := values.(*array.Int32)
	if !ok {
		return nil, columnError(table, name, "is %s, want list<int32>", l.DataType())
	}
	return func(i int) []int32 {
		if l.IsNull(i) {
			return nil
		}
		start, end := l.ValueOffsets(i)
		out := make([]int32, end-start)
		for k := range out {
			out[k] = v.Value(int(start) + k)
		}
		return out
	}, nil
}

// floatListColumn reads a list<float32> (or float16, float64) column; a null list reads as empty.
func floatListColumn(rec arrow.RecordBatch, table, name string) (func(i int) []float64, error) {
	l, values, err := listColumn(rec, table, name, "list<float32>")
	if err != nil {
		return nil, err
	}
	f, ok := floatAt(values)
	if !ok {
		return nil, columnError(table, name, "is %s, want list<float32>", l.DataType())
	}
	return func(i int) []float64 {
		if l.IsNull(i) {
			return nil
		}
		start, end := l.ValueOffsets(i)
		out := make([]float64, end-start)
		for k := range out {
			out[k] = f(int(start) + k)
		}
		return out
	}, nil
}

// stringListColumn reads a list<utf8> column; a null list reads as empty.
func stringListColumn(rec arrow.RecordBatch, table, name string) (func(i int) []string, error) {
	l, values, err := listColumn(rec, table, name, "list<utf8>")
	if err != nil {
		return nil, err
	}
	var value func(int) string
	switch v := values.(type) {
	case *array.String:
		value = v.Value
	case *array.LargeString:
		value = v.Value
	case *array.StringView:
		value = v.Value
	default:
		return nil, columnError(table, name, "is %s, want list<utf8>", l.DataType())
	}
	return func(i int) []string {
		if l.IsNull(i) {
			return nil
		}
		start, end := l.ValueOffsets(i)
		out := make([]string, end-start)
		for k := range out {
			out[k] = value(int(start) + k)
		}
		return out
	}, nil
}

// hasColumn reports whether rec has a column called name (for optional columns).
func hasColumn(rec arrow.RecordBatch, name string) bool {
	return len(rec.Schema().FieldIndices(name)) > 0
}
