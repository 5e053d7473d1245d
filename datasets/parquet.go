package datasets

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// LoadParquet reads the Parquet file at path (see ReadParquet).
func LoadParquet(path string) ([]tokenizer.Conversation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("datasets: %w", err)
	}
	defer f.Close()
	return ReadParquet(f, path)
}

// ReadParquet reads one conversation per row of a Parquet table. The messages come from either
//
//   - a column "messages" of type list<struct<role, content, reasoning_content, name, tool_calls,
//     tool_call_id, ...>>, with the same field names and rules as a JSONL message, or
//   - a column "conversation" of strings, each the JSON text of one conversation in any shape ReadJSONL
//     accepts for a line.
//
// Optional columns "id" (string or integer), "thinking" (bool) and "thinking_effort" (string) set those
// fields; a null leaves them unset. name is the file name used in errors, which count rows from 1.
func ReadParquet(r parquet.ReaderAtSeeker, name string) ([]tokenizer.Conversation, error) {
	var convs []tokenizer.Conversation
	row := 0
	_, err := eachParquetBatch(r, memory.DefaultAllocator, false, func(rec arrow.RecordBatch) error {
		cols, err := findColumns(rec.Schema())
		if err != nil {
			return &Error{File: name, Err: err}
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			row++
			c, err := cols.read(rec, i)
			if err != nil {
				return locate(err, name, "row", row)
			}
			if c.ID == "" {
				c.ID = "row:" + strconv.Itoa(row) // results name their conversation (tables' conversation column), as datasets.Entry.Name
			}
			convs = append(convs, c)
		}
		return nil
	})
	if err != nil {
		if _, ok := err.(*Error); ok {
			return nil, err
		}
		return nil, fmt.Errorf("datasets: reading %s: %w", name, err)
	}
	return convs, nil
}

// columns holds the indices of the columns ReadParquet uses; -1 is absent.
type columns struct {
	messages, conversation, id, thinking, effort int
}

// findColumns finds the columns by name and checks their types, naming the column and type when wrong.
func findColumns(s *arrow.Schema) (columns, error) {
	c := columns{messages: -1, conversation: -1, id: -1, thinking: -1, effort: -1}
	for i, f := range s.Fields() {
		var ok bool
		switch f.Name {
		case "messages":
			c.messages, ok = i, isListOfStruct(f.Type)
			if !ok {
				return c, fmt.Errorf("column \"messages\" is %s, want list<struct<role, content, ...>>", f.Type)
			}
		case "conversation":
			c.conversation, ok = i, isString(f.Type)
			if !ok {
				return c, fmt.Errorf("column \"conversation\" is %s, want a string of JSON text", f.Type)
			}
		case "id":
			c.id, ok = i, isString(f.Type) || arrow.IsInteger(f.Type.ID())
			if !ok {
				return c, fmt.Errorf("column \"id\" is %s, want a string or an integer", f.Type)
			}
		case "thinking":
			c.thinking, ok = i, f.Type.ID() == arrow.BOOL
			if !ok {
				return c, fmt.Errorf("column \"thinking\" is %s, want bool", f.Type)
			}
		case "thinking_effort":
			c.effort, ok = i, isString(f.Type)
			if !ok {
				return c, fmt.Errorf("column \"thinking_effort\" is %s, want a string", f.Type)
			}
		}
	}
	if c.messages < 0 && c.conversation < 0 {
		return c, fmt.Errorf("no column \"messages\" (list<struct<role, content, ...>>) or \"conversation\" (JSON text) in %s", s)
	}
	return c, nil
}

// read reads row i of rec. A "messages" column wins over a "conversation" column; the id,
// thinking and effort columns, when present and not null, override what the JSON text says.
func (c columns) read(rec arrow.RecordBatch, i int) (tokenizer.Conversation, error) {
	var conv tokenizer.Conversation
	switch {
	case c.messages >= 0:
		col := rec.Column(c.messages)
		if col.IsNull(i) {
			return conv, errorf("messages", "null")
		}
		data, err := json.Marshal(col.GetOneForMarshal(i))
		if err != nil {
			return conv, errorf("messages", "%v", err)
		}
		if conv.Messages, err = parseMessages(data, "messages"); err != nil {
			return conv, err
		}
	default:
		col := rec.Column(c.conversation)
		if col.IsNull(i) {
			return conv, errorf("conversation", "null")
		}
		var err error
		if conv, err = parseConversation([]byte(stringAt(col, i))); err != nil {
			if fe, ok := err.(*fieldError); ok { // name the field inside the JSON text
				return conv, &fieldError{field: "conversation." + fe.field, err: fe.err}
			}
			return conv, errorf("conversation", "%v", err)
		}
	}
	if c.id >= 0 && !rec.Column(c.id).IsNull(i) {
		conv.ID = stringAt(rec.Column(c.id), i)
	}
	if c.thinking >= 0 && !rec.Column(c.thinking).IsNull(i) {
		conv.Thinking = tokenizer.ThinkingOff
		if rec.Column(c.thinking).(*array.Boolean).Value(i) {
			conv.Thinking = tokenizer.ThinkingOn
		}
	}
	if c.effort >= 0 && !rec.Column(c.effort).IsNull(i) {
		conv.Effort = stringAt(rec.Column(c.effort), i)
		switch conv.Effort {
		case "low", "medium", "high", "max":
		default:
			return conv, errorf("thinking_effort", "%q is not one of low, medium, high, max", conv.Effort)
		}
	}
	return conv, nil
}

// isListOfStruct reports whether dt is a list (or large list) of structs.
func isListOfStruct(dt arrow.DataType) bool {
	switch t := dt.(type) {
	case *arrow.ListType:
		return t.Elem().ID() == arrow.STRUCT
	case *arrow.LargeListType:
		return t.Elem().ID() == arrow.STRUCT
	}
	return false
}

// isString reports whether dt holds UTF-8 text.
func isString(dt arrow.DataType) bool {
	switch dt.ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW:
		return true
	}
	return false
}

// stringAt reads a string or integer cell as text.
func stringAt(arr arrow.Array, i int) string {
	switch a := arr.(type) {
	case *array.String:
		return a.Value(i)
	case *array.LargeString:
		return a.Value(i)
	case *array.StringView:
		return a.Value(i)
	case *array.Int64:
		return strconv.FormatInt(a.Value(i), 10)
	case *array.Int32:
		return strconv.FormatInt(int64(a.Value(i)), 10)
	}
	return arr.ValueStr(i)
}
