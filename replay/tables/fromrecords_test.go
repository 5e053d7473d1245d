package tables

import (
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestFromRecordsShuffled feeds FromRecords one-row batches in reverse order (as a query that reorders
// rows might): the results must still come out in position order.
func TestFromRecordsShuffled(t *testing.T) {
	mem := checkedAlloc(t)
	in := makeResults(9, 2, spec{seq: 4, tokens: 5, conv: true}, spec{seq: 8, tokens: 3, conv: true})
	set, err := Build(in, Options{Allocator: mem, BatchRows: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Release()
	recs := slices.Clone(set.Tokens.Records)
	slices.Reverse(recs)
	got, err := FromRecords(recs...)
	if err != nil {
		t.Fatal(err)
	}
	want := expectAfterRoundTrip(in)
	slices.Reverse(want) // sequences come in order of first appearance
	for i := range want {
		want[i].Lens, want[i].Hidden, want[i].Router, want[i].Mixes = nil, nil, nil, nil
	}
	if d := diff(want, got); d != "" {
		t.Errorf("FromRecords: %s", d)
	}
	// Unnamed, as a table read from another tool's file: FromSet goes by the slot.
	lensRecs := slices.Clone(set.Lens.Records)
	slices.Reverse(lensRecs)
	back, err := FromSet(&Set{Tokens: set.Tokens, Lens: &Table{Schema: set.Lens.Schema, Records: lensRecs}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range back {
		slices.Reverse(back[i].Lens) // captures in order of first appearance: reversed too
	}
	if d := diff(expectAfterRoundTrip(in)[0].Lens, back[0].Lens); d != "" {
		t.Errorf("FromSet lens: %s", d)
	}
}

// TestFromRecordsErrors replaces one column of a good tokens record at a time and checks the error names
// the table and column.
func TestFromRecordsErrors(t *testing.T) {
	mem := checkedAlloc(t)
	set := handSet(t, mem)
	rec := set.Tokens.Records[0]
	int64s := func() arrow.Array {
		b := array.NewInt64Builder(mem)
		defer b.Release()
		b.AppendValues([]int64{0, 1, 2}, nil)
		return b.NewArray()
	}
	int32s := func(v ...int32) arrow.Array {
		b := array.NewInt32Builder(mem)
		defer b.Release()
		b.AppendValues(v, []bool{true, true, v[2] >= 0})
		return b.NewArray()
	}
	// pieces are topk_tokens lists of the given lengths (handResults' topk_ids have 2, 0 and 1).
	pieces := func(lens ...int) func() arrow.Array {
		return func() arrow.Array {
			b := array.NewListBuilder(mem, arrow.BinaryTypes.String)
			defer b.Release()
			for _, n := range lens {
				b.Append(true)
				for range n {
					b.ValueBuilder().(*array.StringBuilder).Append("x")
				}
			}
			return b.NewArray()
		}
	}
	largeStrings := func() arrow.Array {
		b := array.NewLargeStringBuilder(mem)
		defer b.Release()
		b.AppendValues([]string{"a", "b", "c"}, nil)
		return b.NewArray()
	}
	tests := []struct {
		name   string
		column string
		with   func() arrow.Array // nil: drop the column
		want   string             // "" means FromRecords must accept it
	}{
		{"missing rank", "rank", nil, `tables: tokens: missing column "rank" (have seq_id, pos,`},
		{"int64 pos", "pos", int64s, `tables: tokens: column "pos": want int32, got int64`},
		{"string ids", "topk_ids", largeStrings, `column "topk_ids": want list<int32>, got large_utf8`},
		{"null token id", "token_id", func() arrow.Array { return int32s(1, 2, -1) }, `column "token_id": null at row 2`},
		{"duplicate position", "pos", func() arrow.Array { return int32s(0, 1, 1) }, "sequence 11: position 1 appears twice"},
		{"position past end", "pos", func() arrow.Array { return int32s(0, 1, 3) }, "position 3 out of range for 3 rows"},
		{"large_string pieces", "token", largeStrings, ""},
		{"no topk_tokens (schema version 1)", "topk_tokens", nil, ""},
		{"topk_tokens named", "topk_tokens", pieces(2, 0, 1), ""},
		{"topk_tokens short", "topk_tokens", pieces(2, 0, 2), `column "topk_tokens": row 2: 2 pieces for 1 topk_ids`},
		{"topk_tokens of ids", "topk_tokens", int64s, `column "topk_tokens": want list<string>, got int64`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changed := replaceColumn(t, mem, rec, tt.column, tt.with)
			defer changed.Release()
			_, err := FromRecords(changed)
			if tt.want == "" {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error: -want containing %q +got %v", tt.want, err)
			}
		})
	}
}

// replaceColumn returns rec with column name replaced by with() (or dropped when with is nil).
func replaceColumn(t *testing.T, mem memory.Allocator, rec arrow.RecordBatch, name string, with func() arrow.Array) arrow.RecordBatch {
	t.Helper()
	var fields []arrow.Field
	var cols []arrow.Array
	for i, f := range rec.Schema().Fields() {
		col := rec.Column(i)
		if f.Name == name {
			if with == nil {
				continue
			}
			col = with()
			defer col.Release()
			f = arrow.Field{Name: name, Type: col.DataType(), Nullable: true}
		}
		fields = append(fields, f)
		cols = append(cols, col)
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows())
}
