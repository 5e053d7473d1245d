package datasets

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// messageType is the struct of one message in a "messages" column, as Hugging Face datasets write it.
var messageType = arrow.StructOf(
	arrow.Field{Name: "role", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "content", Type: arrow.BinaryTypes.String, Nullable: true},
	arrow.Field{Name: "reasoning_content", Type: arrow.BinaryTypes.String, Nullable: true},
	arrow.Field{Name: "tool_calls", Nullable: true, Type: arrow.ListOf(arrow.StructOf(
		arrow.Field{Name: "id", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "type", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "function", Type: arrow.StructOf(
			arrow.Field{Name: "name", Type: arrow.BinaryTypes.String},
			arrow.Field{Name: "arguments", Type: arrow.BinaryTypes.String},
		)},
	))},
)

// msg is one row of messageType for the builder; empty strings become nulls.
type msg struct{ role, content, reasoning, call string }

// messagesFile writes a Parquet file with columns id, thinking and messages, one row per conversation.
func messagesFile(t *testing.T, convs [][]msg) []byte {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "thinking", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "messages", Type: arrow.ListOf(messageType)},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	ids := b.Field(0).(*array.Int64Builder)
	th := b.Field(1).(*array.BooleanBuilder)
	lb := b.Field(2).(*array.ListBuilder)
	sb := lb.ValueBuilder().(*array.StructBuilder)
	str := func(i int, s string) {
		fb := sb.FieldBuilder(i).(*array.StringBuilder)
		if s == "" {
			fb.AppendNull()
		} else {
			fb.Append(s)
		}
	}
	for i, conv := range convs {
		ids.Append(int64(100 + i))
		if i == 0 {
			th.AppendNull()
		} else {
			th.Append(i%2 == 1)
		}
		lb.Append(true)
		for _, m := range conv {
			sb.Append(true)
			str(0, m.role)
			str(1, m.content)
			str(2, m.reasoning)
			calls := sb.FieldBuilder(3).(*array.ListBuilder)
			if m.call == "" {
				calls.AppendNull()
				continue
			}
			calls.Append(true)
			cs := calls.ValueBuilder().(*array.StructBuilder)
			cs.Append(true)
			cs.FieldBuilder(0).(*array.StringBuilder).Append("call_1")
			cs.FieldBuilder(1).(*array.StringBuilder).Append("function")
			fn := cs.FieldBuilder(2).(*array.StructBuilder)
			fn.Append(true)
			fn.FieldBuilder(0).(*array.StringBuilder).Append(m.call)
			fn.FieldBuilder(1).(*array.StringBuilder).Append(`{"q": 1}`)
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	return parquetBytes(t, rec)
}

// parquetBytes writes rec as a Parquet file in memory.
func parquetBytes(t *testing.T, rec arrow.RecordBatch) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := writeParquet(&buf, rec.Schema(), []arrow.RecordBatch{rec}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// stringColumns writes a Parquet file of string columns (nil entries are nulls).
func stringColumns(t *testing.T, cols map[string][]*string) []byte {
	t.Helper()
	var fields []arrow.Field
	var arrs []arrow.Array
	n := 0
	for _, name := range []string{"id", "conversation", "thinking_effort", "messages"} {
		vals, ok := cols[name]
		if !ok {
			continue
		}
		sb := array.NewStringBuilder(memory.DefaultAllocator)
		for _, v := range vals {
			if v == nil {
				sb.AppendNull()
			} else {
				sb.Append(*v)
			}
		}
		fields = append(fields, arrow.Field{Name: name, Type: arrow.BinaryTypes.String, Nullable: true})
		arrs = append(arrs, sb.NewArray())
		sb.Release()
		n = len(vals)
	}
	rec := array.NewRecordBatch(arrow.NewSchema(fields, nil), arrs, int64(n))
	defer rec.Release()
	for _, a := range arrs {
		a.Release()
	}
	return parquetBytes(t, rec)
}

func ptr(s string) *string { return &s }

func TestReadParquetMessages(t *testing.T) {
	data := messagesFile(t, [][]msg{
		{{role: "user", content: "hi"}, {role: "assistant", content: "hello"}},
		{{role: "user", content: "weather?"}, {role: "assistant", reasoning: "look it up", call: "get_weather"},
			{role: "tool", content: "sunny"}},
	})
	got, err := ReadParquet(bytes.NewReader(data), "m.parquet")
	if err != nil {
		t.Fatal(err)
	}
	want := []tokenizer.Conversation{
		{ID: "100", Thinking: tokenizer.ThinkingUnset, Messages: []tokenizer.Message{user("hi"), asst("hello")}},
		{ID: "101", Thinking: tokenizer.ThinkingOn, Messages: []tokenizer.Message{
			user("weather?"),
			{Role: "assistant", Reasoning: "look it up",
				ToolCalls: []tokenizer.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"q": 1}`}}},
			{Role: "tool", Content: "sunny"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("(-want +got):\n-%+v\n+%+v", want, got)
	}

	// The same through a file, by extension.
	path := filepath.Join(t.TempDir(), "m.parquet")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if got2, err := Load(path); err != nil || !reflect.DeepEqual(got2, want) {
		t.Errorf("Load: %v, %+v", err, got2)
	}
}

func TestReadParquetConversationColumn(t *testing.T) {
	data := stringColumns(t, map[string][]*string{
		"id": {ptr("a"), nil},
		"conversation": {
			ptr(`[{"role":"user","content":"one"}]`),
			ptr(`{"id":"from-json","thinking":false,"messages":[{"role":"user","content":"two"}]}`)},
		"thinking_effort": {ptr("low"), nil},
	})
	got, err := ReadParquet(bytes.NewReader(data), "c.parquet")
	if err != nil {
		t.Fatal(err)
	}
	want := []tokenizer.Conversation{
		{ID: "a", Effort: "low", Messages: []tokenizer.Message{user("one")}},
		{ID: "from-json", Thinking: tokenizer.ThinkingOff, Messages: []tokenizer.Message{user("two")}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("(-want +got):\n-%+v\n+%+v", want, got)
	}
}

func TestReadParquetErrors(t *testing.T) {
	tests := []struct {
		name      string
		data      []byte
		wantRow   int
		wantField string
		wantMsg   string
	}{
		{"bad role in row 2", messagesFile(t, [][]msg{{{role: "user", content: "a"}}, {{role: "narrator", content: "b"}}}),
			2, "messages[0].role", `unknown role "narrator"`},
		{"no usable column", stringColumns(t, map[string][]*string{"id": {ptr("a")}}),
			0, "", `no column "messages"`},
		{"messages of wrong type", stringColumns(t, map[string][]*string{"messages": {ptr("[]")}}),
			0, "", `column "messages" is utf8, want list<struct`},
		{"null conversation", stringColumns(t, map[string][]*string{"conversation": {ptr(`[{"role":"user"}]`), nil}}),
			2, "conversation", "null"},
		{"bad json in conversation", stringColumns(t, map[string][]*string{"conversation": {ptr(`[{"role":"user","content":[{"type":"audio"}]}]`)}}),
			1, "conversation.messages[0].content[0].type", `"audio" is not supported`},
		{"bad effort column", stringColumns(t, map[string][]*string{"conversation": {ptr(`[{"role":"user"}]`)}, "thinking_effort": {ptr("huge")}}),
			1, "thinking_effort", "not one of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadParquet(bytes.NewReader(tt.data), "x.parquet")
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("want *Error, got %v", err)
			}
			if e.File != "x.parquet" || e.Line != tt.wantRow || e.Field != tt.wantField || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("want x.parquet row %d field %q containing %q; got %q (row %d field %q)",
					tt.wantRow, tt.wantField, tt.wantMsg, err, e.Line, e.Field)
			}
			if tt.wantRow > 0 && !strings.Contains(err.Error(), "x.parquet row ") {
				t.Errorf("message should say row: %q", err)
			}
		})
	}
	// Not Parquet at all: an error, not a panic, and not an *Error (the file is unreadable, not invalid).
	_, err := ReadParquet(bytes.NewReader([]byte("PAR1 this is not parquet PAR1")), "junk.parquet")
	if err == nil || !strings.Contains(err.Error(), "junk.parquet") {
		t.Errorf("junk: want an error naming the file, got %v", err)
	}
	// A file that is not Parquet, or was cut short, says so (before: "parquet: file is smaller than
	// indicated metadata size" for both).
	good := messagesFile(t, [][]msg{{{role: "user", content: "a"}}})
	for _, tt := range []struct {
		name string
		data []byte
		want string
	}{
		{"JSONL named .parquet", []byte(`{"messages":[{"role":"user","content":"a"}]}` + "\n"),
			`datasets: reading x.parquet: not a Parquet file: it does not start with PAR1 (it starts with "{\"messages\":[{\"r")`},
		{"cut in half", good[:len(good)/2], "datasets: reading x.parquet: a Parquet file cut short ("},
		{"empty", nil, `datasets: reading x.parquet: not a Parquet file: it does not start with PAR1 (it starts with "")`},
	} {
		if _, err := ReadParquet(bytes.NewReader(tt.data), "x.parquet"); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: -want …%s… +got %v", tt.name, tt.want, err)
		}
	}
}
