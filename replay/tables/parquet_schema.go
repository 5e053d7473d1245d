package tables

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Reading Parquet back through pqarrow gives the stored Arrow schema two differences that are not in the
// data: every field gains "PARQUET:field_id" metadata, and list items are named "element" (the Parquet
// spec's name) instead of Arrow's default "item", which Build writes and pyarrow builds. Records read from
// Parquet are relabeled to the cleaned schema, so that a Parquet round trip gives back a schema equal to
// Build's, field for field; the buffers are shared, nothing is copied.

// parquetFieldID is the field metadata key pqarrow adds on read.
const parquetFieldID = "PARQUET:field_id"

// cleanSchema returns sc without the Parquet field ids and with list items named "item"; the schema
// metadata is kept.
func cleanSchema(sc *arrow.Schema) *arrow.Schema {
	fields := make([]arrow.Field, sc.NumFields())
	for i, f := range sc.Fields() {
		fields[i] = cleanField(f)
	}
	md := sc.Metadata()
	return arrow.NewSchema(fields, &md)
}

// cleanField is cleanSchema for one field, recursing into list items.
func cleanField(f arrow.Field) arrow.Field {
	if i := f.Metadata.FindKey(parquetFieldID); i >= 0 {
		var keys, vals []string
		for j, k := range f.Metadata.Keys() {
			if j != i {
				keys, vals = append(keys, k), append(vals, f.Metadata.Values()[j])
			}
		}
		f.Metadata = arrow.NewMetadata(keys, vals)
	}
	switch t := f.Type.(type) {
	case *arrow.ListType:
		f.Type = arrow.ListOfField(itemField(t.ElemField()))
	case *arrow.LargeListType:
		f.Type = arrow.LargeListOfField(itemField(t.ElemField()))
	case *arrow.FixedSizeListType:
		f.Type = arrow.FixedSizeListOfField(t.Len(), itemField(t.ElemField()))
	}
	return f
}

// itemField is a list's item field cleaned and named "item".
func itemField(e arrow.Field) arrow.Field {
	e = cleanField(e)
	e.Name = "item"
	return e
}

// relabel returns rec with schema sc, whose fields must have rec's columns' layouts under other names;
// rec is not released.
func relabel(rec arrow.RecordBatch, sc *arrow.Schema) (arrow.RecordBatch, error) {
	if rec.Schema().Equal(sc) && rec.Schema().Metadata().Equal(sc.Metadata()) {
		rec.Retain()
		return rec, nil
	}
	if int(rec.NumCols()) != sc.NumFields() {
		return nil, fmt.Errorf("record has %d columns, schema %d", rec.NumCols(), sc.NumFields())
	}
	cols := make([]arrow.Array, rec.NumCols())
	for i, col := range rec.Columns() {
		d := relabelData(col.Data(), sc.Field(i).Type)
		cols[i] = array.MakeFromData(d)
		d.Release()
	}
	out := array.NewRecordBatch(sc, cols, rec.NumRows())
	for _, c := range cols {
		c.Release()
	}
	return out, nil
}

// relabelData returns d typed as dt (same layout, other field names), relabeling children to dt's child
// types. The caller releases the result.
func relabelData(d arrow.ArrayData, dt arrow.DataType) arrow.ArrayData {
	if arrow.TypeEqual(d.DataType(), dt, arrow.CheckMetadata()) {
		d.Retain()
		return d
	}
	children := d.Children()
	if nested, ok := dt.(arrow.NestedType); ok && len(nested.Fields()) == len(children) {
		kids := make([]arrow.ArrayData, len(children))
		for i, c := range children {
			kids[i] = relabelData(c, nested.Fields()[i].Type)
		}
		children = kids
		defer func() {
			for _, k := range kids {
				k.Release()
			}
		}()
	}
	return array.NewData(dt, d.Len(), d.Buffers(), children, d.NullN(), d.Offset())
}
