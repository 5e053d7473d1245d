package plotting

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/float16"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Test-only schemas: just the columns each reader needs, in the types DESIGN.md gives for the engine's
// tables (which replay/ defines). Extra columns must be ignored, so each has one.

func i32(name string) arrow.Field {
	return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int32}
}

func f32(name string, nullable bool) arrow.Field {
	return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Float32, Nullable: nullable}
}

// record builds a record of schema, calling fill with the builder.
func record(t *testing.T, mem memory.Allocator, fields []arrow.Field, fill func(b *array.RecordBuilder)) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(mem, arrow.NewSchema(fields, nil))
	defer b.Release()
	fill(b)
	return b.NewRecordBatch()
}

func TestTokenRows(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	str := func(name string) arrow.Field { return arrow.Field{Name: name, Type: arrow.BinaryTypes.String} }
	// The required columns first (required is how many), then the optional ones.
	const required = 8
	fields := []arrow.Field{i32("seq_id"), i32("pos"), i32("token_id"), str("token"), i32("message"),
		i32("target_id"), f32("logprob", true), {Name: "rank", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		str("channel"), f32("entropy", false), {Name: "topk_ids", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
		{Name: "topk_logprobs", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)},
		{Name: "topk_tokens", Type: arrow.ListOf(arrow.BinaryTypes.String)}, str("conversation"), str("thinking")}
	rec := record(t, mem, fields, func(b *array.RecordBuilder) {
		b.Field(0).(*array.Int32Builder).AppendValues([]int32{0, 0}, nil)
		b.Field(1).(*array.Int32Builder).AppendValues([]int32{0, 1}, nil)
		b.Field(2).(*array.Int32Builder).AppendValues([]int32{10, 11}, nil)
		b.Field(3).(*array.StringBuilder).AppendValues([]string{"Hi", "!"}, nil)
		b.Field(4).(*array.Int32Builder).AppendValues([]int32{1, 1}, nil)
		b.Field(5).(*array.Int32Builder).AppendValues([]int32{11, -1}, nil)
		b.Field(6).(*array.Float32Builder).AppendValues([]float32{-0.5, 0}, []bool{true, false})
		b.Field(7).(*array.Int32Builder).AppendValues([]int32{2, 0}, []bool{true, false})
		b.Field(8).(*array.StringBuilder).AppendValues([]string{"user", "user"}, nil)
		b.Field(9).(*array.Float32Builder).AppendValues([]float32{1.25, 2}, nil)
		ids := b.Field(10).(*array.ListBuilder)
		lps := b.Field(11).(*array.ListBuilder)
		pieces := b.Field(12).(*array.ListBuilder)
		for i := 0; i < 2; i++ {
			ids.Append(true)
			ids.ValueBuilder().(*array.Int32Builder).AppendValues([]int32{11, 12}, nil)
			lps.Append(true)
			lps.ValueBuilder().(*array.Float32Builder).AppendValues([]float32{-0.5, -1}, nil)
			pieces.Append(true)
			if i == 0 { // the second row as an engine without a tokenizer writes it: an empty list
				pieces.ValueBuilder().(*array.StringBuilder).AppendValues([]string{"!", `\n`}, nil)
			}
		}
		b.Field(13).(*array.StringBuilder).AppendValues([]string{"greeting", "greeting"}, nil)
		b.Field(14).(*array.StringBuilder).AppendValues([]string{"off", "off"}, nil)
	})
	defer rec.Release()
	rows, err := TokenRows(rec, rec)
	if err != nil {
		t.Fatal(err)
	}
	want := TokenRow{SeqID: 0, Pos: 0, TokenID: 10, Token: "Hi", Message: 1, Channel: "user", Conversation: "greeting",
		Thinking: "off", TargetID: 11, TargetToken: "!", Logprob: -0.5, Rank: 2, Entropy: 1.25,
		TopKIDs: []int32{11, 12}, TopKLogprobs: []float64{-0.5, -1}, TopKTokens: []string{"!", `\n`}}
	if len(rows) != 4 || !reflect.DeepEqual(rows[0], want) {
		t.Errorf("(-want +got):\n-%+v\n+%+v", want, rows)
	}
	if len(rows[1].TopKTokens) != 0 || len(rows[1].TopKIDs) != 2 {
		t.Errorf("row without pieces: want 2 ids and no pieces, got %+v", rows[1])
	}
	if !math.IsNaN(rows[1].Logprob) || rows[1].TargetID != -1 || rows[1].Rank != -1 || rows[1].TargetToken != "" {
		t.Errorf("last position: want NaN logprob, target -1 and rank -1, got %+v", rows[1])
	}

	// Without the optional columns (a table of schema version 2 lacks conversation and thinking): entropy
	// NaN, no top-k, no channel, conversation or thinking.
	rec2 := record(t, mem, fields[:required], func(b *array.RecordBuilder) {
		for i := 0; i < required; i++ {
			switch fb := b.Field(i).(type) {
			case *array.Int32Builder:
				fb.Append(1)
			case *array.StringBuilder:
				fb.Append("x")
			case *array.Float32Builder:
				fb.Append(-1)
			}
		}
	})
	defer rec2.Release()
	rows, err = TokenRows(rec2)
	if err != nil || len(rows) != 1 || !math.IsNaN(rows[0].Entropy) || rows[0].TopKIDs != nil ||
		rows[0].Channel != "" || rows[0].Conversation != "" || rows[0].Thinking != "" || rows[0].Message != 1 {
		t.Errorf("optional columns absent: %+v, %v", rows, err)
	}

	// message is required: every table the engine wrote has it, and a missing one would read as -1, "not
	// in a message", for every row.
	noMessage := record(t, mem, append(fields[:4:4], fields[5:required]...), func(*array.RecordBuilder) {})
	defer noMessage.Release()
	if _, err := TokenRows(noMessage); !errors.Is(err, ErrColumn) || !strings.Contains(err.Error(), `column "message": missing`) {
		t.Errorf("a tokens table without message: %v, want ErrColumn naming it", err)
	}
}

func TestOtherRows(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	// lens with a float16 entropy and int64 ids: accepted. The second row is a last position: no target.
	lens := record(t, mem, []arrow.Field{i32("seq_id"), {Name: "pos", Type: arrow.PrimitiveTypes.Int64}, i32("layer"),
		{Name: "entropy", Type: arrow.FixedWidthTypes.Float16}, f32("target_logprob", true),
		{Name: "target_rank", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, i32("extra")},
		func(b *array.RecordBuilder) {
			b.Field(0).(*array.Int32Builder).AppendValues([]int32{2, 2}, nil)
			b.Field(1).(*array.Int64Builder).AppendValues([]int64{5, 6}, nil)
			b.Field(2).(*array.Int32Builder).AppendValues([]int32{7, 7}, nil)
			b.Field(3).(*array.Float16Builder).AppendValues([]float16.Num{float16.New(0.75), float16.New(2)}, nil)
			b.Field(4).(*array.Float32Builder).AppendValues([]float32{-1.5, 0}, []bool{true, false})
			b.Field(5).(*array.Int32Builder).AppendValues([]int32{4, 0}, []bool{true, false})
			b.Field(6).(*array.Int32Builder).AppendValues([]int32{0, 0}, nil)
		})
	defer lens.Release()
	got, err := LensRows(lens)
	wantLens := LensRow{SeqID: 2, Pos: 5, Layer: 7, Entropy: 0.75, TargetLogprob: -1.5, TargetRank: 4}
	if err != nil || len(got) != 2 || got[0] != wantLens || !math.IsNaN(got[1].TargetLogprob) || got[1].TargetRank != -1 {
		t.Errorf("LensRows: %+v, %v; want %+v then a row with NaN and -1", got, err, wantLens)
	}

	router := record(t, mem, []arrow.Field{i32("seq_id"), i32("pos"), i32("layer"),
		{Name: "expert_ids", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
		{Name: "expert_weights", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)}},
		func(b *array.RecordBuilder) {
			for i := 0; i < 3; i++ {
				b.Field(i).(*array.Int32Builder).AppendValues([]int32{int32(i), int32(i)}, nil)
			}
			b.Field(3).(*array.ListBuilder).Append(true)
			b.Field(3).(*array.ListBuilder).ValueBuilder().(*array.Int32Builder).AppendValues([]int32{4, 9}, nil)
			b.Field(4).(*array.ListBuilder).Append(true)
			b.Field(4).(*array.ListBuilder).ValueBuilder().(*array.Float32Builder).AppendValues([]float32{0.75, 0.25}, nil)
			b.Field(3).(*array.ListBuilder).AppendNull() // null lists read as empty, and agree
			b.Field(4).(*array.ListBuilder).AppendNull()
		})
	defer router.Release()
	wantRouter := []RouterRow{{0, 1, 2, []int32{4, 9}, []float64{0.75, 0.25}}, {0, 1, 2, nil, nil}}
	if got, err := RouterRows(router); err != nil || !reflect.DeepEqual(got, wantRouter) {
		t.Errorf("RouterRows: %+v, %v; want %+v", got, err, wantRouter)
	}
	uneven := record(t, mem, []arrow.Field{i32("seq_id"), i32("pos"), i32("layer"),
		{Name: "expert_ids", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
		{Name: "expert_weights", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)}},
		func(b *array.RecordBuilder) {
			for i := 0; i < 3; i++ {
				b.Field(i).(*array.Int32Builder).Append(0)
			}
			b.Field(3).(*array.ListBuilder).Append(true)
			b.Field(3).(*array.ListBuilder).ValueBuilder().(*array.Int32Builder).AppendValues([]int32{4, 9}, nil)
			b.Field(4).(*array.ListBuilder).Append(true)
			b.Field(4).(*array.ListBuilder).ValueBuilder().(*array.Float32Builder).Append(1)
		})
	defer uneven.Release()
	if _, err := RouterRows(uneven); err == nil || !strings.Contains(err.Error(), "2 expert_ids but 1 expert_weights") {
		t.Errorf("RouterRows with fewer weights than experts: %v", err)
	}

	attn := record(t, mem, []arrow.Field{i32("seq_id"), i32("pos"), i32("layer"),
		{Name: "site", Type: arrow.BinaryTypes.String}, {Name: "weights", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)}},
		func(b *array.RecordBuilder) {
			for i := 0; i < 3; i++ {
				b.Field(i).(*array.Int32Builder).Append(1)
			}
			b.Field(3).(*array.StringBuilder).Append("mlp")
			b.Field(4).(*array.ListBuilder).Append(true)
			b.Field(4).(*array.ListBuilder).ValueBuilder().(*array.Float32Builder).AppendValues([]float32{0.25, 0.75}, nil)
		})
	defer attn.Release()
	if got, err := AttnResRows(attn); err != nil || !reflect.DeepEqual(got, []AttnResRow{{1, 1, 1, "mlp", []float64{0.25, 0.75}}}) {
		t.Errorf("AttnResRows: %+v, %v", got, err)
	}
}

func TestRowsColumnErrors(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	str := arrow.Field{Name: "site", Type: arrow.BinaryTypes.String}
	tests := []struct {
		name   string
		fields []arrow.Field
		read   func(arrow.RecordBatch) error
		want   string
	}{
		{"missing", []arrow.Field{i32("seq_id"), i32("pos")},
			func(r arrow.RecordBatch) error { _, err := LensRows(r); return err },
			`lens table: column "layer": missing (have seq_id, pos)`},
		{"float as int", []arrow.Field{i32("seq_id"), f32("pos", false), i32("layer"), f32("entropy", false)},
			func(r arrow.RecordBatch) error { _, err := LensRows(r); return err },
			`lens table: column "pos": is float32, want int32`},
		{"int as float", []arrow.Field{i32("seq_id"), i32("pos"), i32("layer"), i32("entropy")},
			func(r arrow.RecordBatch) error { _, err := LensRows(r); return err },
			`column "entropy": is int32, want float32`},
		{"string as list", []arrow.Field{i32("seq_id"), i32("pos"), i32("layer"), {Name: "expert_ids", Type: arrow.BinaryTypes.String}},
			func(r arrow.RecordBatch) error { _, err := RouterRows(r); return err },
			`router table: column "expert_ids": is utf8, want list<int32>`},
		{"list of wrong element", []arrow.Field{i32("seq_id"), i32("pos"), i32("layer"), str,
			{Name: "weights", Type: arrow.ListOf(arrow.BinaryTypes.String)}},
			func(r arrow.RecordBatch) error { _, err := AttnResRows(r); return err },
			`attnres table: column "weights": is list<item: utf8, nullable>, want list<float32>`},
		{"int as string", []arrow.Field{i32("seq_id"), i32("pos"), i32("token_id"), i32("token")},
			func(r arrow.RecordBatch) error { _, err := TokenRows(r); return err },
			`tokens table: column "token": is int32, want utf8`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := record(t, mem, tt.fields, func(*array.RecordBuilder) {})
			defer rec.Release()
			err := tt.read(rec)
			if !errors.Is(err, ErrColumn) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("want an ErrColumn containing %q, got %v", tt.want, err)
			}
		})
	}
}
