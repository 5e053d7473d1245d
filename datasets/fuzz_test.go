package datasets

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// FuzzReadJSONL checks that the JSONL reader never panics, that whatever it accepts is a conversation
// the engine can take (at least one message, known roles), that every rejection is an *Error, and that
// what it accepts survives a round trip through tokenizer's own JSON shape.
//
//	go test ./datasets -run '^$' -fuzz FuzzReadJSONL -fuzztime 30s
func FuzzReadJSONL(f *testing.F) {
	for _, line := range bytes.Split(ExamplesJSONL(), []byte("\n")) {
		f.Add(line)
	}
	for _, seed := range []string{
		`[{"role":"user","content":"hi"}]`,
		`{"messages":[{"role":"bot"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image"}]}]}`,
		`[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{"x":[1,{"y":null}]}}}]}]`,
		`[{"role":"assistant","tool_calls":[{"name":"f","arguments":"not json"}]}]`,
		`{"id":1e400,"thinking":null,"messages":[{"role":"tool","content":null,"tool_call_id":"c"}]}`,
		"{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}\n\n[]",
		// invalid UTF-8 inside arguments given as an object (found by the fuzzer in CI)
		"[{\"role\":\"assistant\",\"tool_calls\":[{\"name\":\"f\",\"arguments\":{\"ci\xff\xfe,\xc3ty\":\"L\"}}]}]",
		`[null]`, `{}`, `[`, `"just a string"`, `{"messages":null}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		convs, err := ReadJSONL(bytes.NewReader(data), "fuzz.jsonl")
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Line < 1 {
				t.Fatalf("rejection is not a located *Error: %v", err)
			}
			return
		}
		for _, c := range convs {
			if len(c.Messages) == 0 {
				t.Fatalf("accepted a conversation without messages: %+v", c)
			}
			for _, m := range c.Messages {
				switch m.Role {
				case tokenizer.RoleSystem, tokenizer.RoleUser, tokenizer.RoleAssistant, tokenizer.RoleTool:
				default:
					t.Fatalf("accepted role %q", m.Role)
				}
			}
			line, err := json.Marshal(c)
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			again, err := ReadJSONL(bytes.NewReader(line), "again.jsonl")
			if err != nil {
				t.Fatalf("own output rejected: %v\n%s", err, line)
			}
			c.Thinking = tokenizer.ThinkingUnset // not part of tokenizer's JSON shape
			if len(again) != 1 || !reflect.DeepEqual(again[0], c) {
				t.Fatalf("round trip (-want +got):\n-%+v\n+%+v", c, again)
			}
		}
	})
}
