package datasets

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// FuzzReadParquet feeds arbitrary bytes (seeded with real conversation files of both shapes) to the
// Parquet conversation reader. It must never panic or hang; a refusal is an error naming the file (an
// *Error when the file reads but a row is invalid); whatever it accepts is a conversation the engine can
// take, that survives a round trip through the JSON shape ReadJSONL reads.
//
//	go test ./datasets -run '^$' -fuzz FuzzReadParquet -fuzztime 2m
func FuzzReadParquet(f *testing.F) {
	for _, seed := range parquetSeeds(f) {
		f.Add(seed)
	}
	damaged, _ := filepath.Glob(filepath.Join("testdata", "damaged", "*.parquet")) // see TestReadParquetDamagedStaysSmall
	for _, path := range damaged {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("PAR1"))
	f.Add([]byte("PAR1\x00\x00\x00\x00PAR1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var (
			convs []tokenizer.Conversation
			err   error
			done  = make(chan struct{})
		)
		go func() {
			defer close(done)
			convs, err = ReadParquet(bytes.NewReader(data), "fuzz.parquet")
		}()
		select { // a file of a few kB reads in microseconds: seconds mean a loop that does not end
		case <-done:
		case <-time.After(parquetReadTimeout):
			t.Fatalf("ReadParquet has not returned after %v on %d bytes: %q", parquetReadTimeout, len(data), data)
		}
		if err != nil {
			var e *Error
			if errors.As(err, &e) && e.File != "fuzz.parquet" {
				t.Fatalf("*Error names file %q: %v", e.File, err)
			}
			if !strings.Contains(err.Error(), "fuzz.parquet") {
				t.Fatalf("refusal does not name the file: %v", err)
			}
			return
		}
		for i, c := range convs {
			if len(c.Messages) == 0 {
				t.Fatalf("row %d: accepted a conversation without messages", i+1)
			}
			for _, m := range c.Messages {
				switch m.Role {
				case tokenizer.RoleSystem, tokenizer.RoleUser, tokenizer.RoleAssistant, tokenizer.RoleTool:
				default:
					t.Fatalf("row %d: accepted role %q", i+1, m.Role)
				}
			}
			switch c.Effort {
			case "", "low", "medium", "high", "max":
			default:
				t.Fatalf("row %d: accepted thinking_effort %q", i+1, c.Effort)
			}
			line, err := json.Marshal(c)
			if err != nil {
				t.Fatalf("row %d: marshal: %v", i+1, err)
			}
			again, err := ReadJSONL(bytes.NewReader(line), "again.jsonl")
			if err != nil {
				t.Fatalf("row %d: its JSON is refused: %v\n%s", i+1, err, line)
			}
			c.Thinking = tokenizer.ThinkingUnset // not part of tokenizer's JSON shape
			if len(again) != 1 || !reflect.DeepEqual(again[0], c) {
				t.Fatalf("row %d: round trip (-want +got):\n-%+v\n+%+v", i+1, c, again)
			}
		}
	})
}

// parquetReadTimeout bounds one ReadParquet call under the fuzzer.
const parquetReadTimeout = 5 * time.Second

// parquetSeeds are small valid files of both shapes ReadParquet reads: a "messages" list-of-struct
// column with id, thinking and effort columns, and a "conversation" column of JSON text.
func parquetSeeds(tb testing.TB) [][]byte {
	mem := memory.DefaultAllocator
	write := func(rec arrow.RecordBatch) []byte {
		defer rec.Release()
		var buf bytes.Buffer
		if err := writeParquet(&buf, rec.Schema(), []arrow.RecordBatch{rec}); err != nil {
			tb.Fatal(err)
		}
		return buf.Bytes()
	}
	msgType := arrow.StructOf(
		arrow.Field{Name: "role", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "content", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "reasoning_content", Type: arrow.BinaryTypes.String, Nullable: true},
	)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "thinking", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "thinking_effort", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "messages", Type: arrow.ListOf(msgType)},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	rows := [][][3]string{
		{{"system", "be brief", ""}, {"user", "hi", ""}, {"assistant", "hello", "greet back"}},
		{{"user", "你好", ""}, {"assistant", "", ""}},
		{{"tool", "42", ""}},
	}
	for i, row := range rows {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		if i == 2 {
			b.Field(1).(*array.BooleanBuilder).AppendNull()
			b.Field(2).(*array.StringBuilder).AppendNull()
		} else {
			b.Field(1).(*array.BooleanBuilder).Append(i == 0)
			b.Field(2).(*array.StringBuilder).Append("low")
		}
		lb := b.Field(3).(*array.ListBuilder)
		sb := lb.ValueBuilder().(*array.StructBuilder)
		lb.Append(true)
		for _, m := range row {
			sb.Append(true)
			for k, v := range m {
				fb := sb.FieldBuilder(k).(*array.StringBuilder)
				if v == "" && k > 0 {
					fb.AppendNull()
				} else {
					fb.Append(v)
				}
			}
		}
	}
	messages := write(b.NewRecordBatch())

	sb := array.NewStringBuilder(mem)
	defer sb.Release()
	sb.Append(`{"messages": [{"role": "user", "content": "hi"}], "thinking": true}`)
	sb.Append(`[{"role": "user", "content": [{"type": "text", "text": "a"}]}, {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}]`)
	col := sb.NewArray()
	defer col.Release()
	convSchema := arrow.NewSchema([]arrow.Field{{Name: "conversation", Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
	conversation := write(array.NewRecordBatch(convSchema, []arrow.Array{col}, int64(col.Len())))
	return [][]byte{messages, conversation}
}
