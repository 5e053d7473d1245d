package tables

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// SameRows reports whether two tables hold the same columns (names and types) and the same rows in the
// same order, however their rows are cut into record batches and whatever their metadata say: tables of
// two runs carry their own result-set ids and request hashes (MetaResultSet, MetaRequestHash), so their
// files differ in those bytes even when every row is the same.
func SameRows(a, b *Table) bool {
	if a.NumRows() != b.NumRows() || len(a.Schema.Fields()) != len(b.Schema.Fields()) {
		return false
	}
	for i, f := range a.Schema.Fields() {
		if g := b.Schema.Field(i); f.Name != g.Name || !arrow.TypeEqual(f.Type, g.Type) {
			return false
		}
		ca, cb := column(a, i), column(b, i)
		if ca == nil || cb == nil {
			return false
		}
		same := array.Equal(ca, cb)
		ca.Release()
		cb.Release()
		if !same {
			return false
		}
	}
	return true
}

// column is column i of every record of t, joined (nil when it cannot be).
func column(t *Table, i int) arrow.Array {
	parts := make([]arrow.Array, len(t.Records))
	for j, r := range t.Records {
		parts[j] = r.Column(i)
	}
	if len(parts) == 0 {
		return array.MakeArrayOfNull(memory.DefaultAllocator, t.Schema.Field(i).Type, 0)
	}
	c, err := array.Concatenate(parts, memory.DefaultAllocator)
	if err != nil {
		return nil
	}
	return c
}
