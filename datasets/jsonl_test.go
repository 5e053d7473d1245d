package datasets

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/datasets/examples"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// Shorthands for expected messages.
func user(s string) tokenizer.Message { return tokenizer.Message{Role: tokenizer.RoleUser, Content: s} }
func asst(s string) tokenizer.Message {
	return tokenizer.Message{Role: tokenizer.RoleAssistant, Content: s}
}

func TestReadJSONLShapes(t *testing.T) {
	tests := []struct {
		name string
		line string
		want tokenizer.Conversation
	}{
		{"object", `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}`,
			tokenizer.Conversation{Messages: []tokenizer.Message{user("hi"), asst("hello")}}},
		{"bare array", `[{"role":"user","content":"hi"}]`,
			tokenizer.Conversation{Messages: []tokenizer.Message{user("hi")}}},
		{"id thinking effort", `{"id":"a1","thinking":true,"thinking_effort":"high","add_generation_prompt":true,"messages":[{"role":"user","content":"x"}]}`,
			tokenizer.Conversation{ID: "a1", Thinking: tokenizer.ThinkingOn, Effort: "high", GenerationPrompt: true,
				Messages: []tokenizer.Message{user("x")}}},
		{"thinking false", `{"thinking":false,"messages":[{"role":"user","content":"x"}]}`,
			tokenizer.Conversation{Thinking: tokenizer.ThinkingOff, Messages: []tokenizer.Message{user("x")}}},
		{"thinking null is unset", `{"thinking":null,"messages":[{"role":"user","content":"x"}]}`,
			tokenizer.Conversation{Thinking: tokenizer.ThinkingUnset, Messages: []tokenizer.Message{user("x")}}},
		{"numeric id", `{"id":12345678901234567890,"messages":[{"role":"user","content":"x"}]}`,
			tokenizer.Conversation{ID: "12345678901234567890", Messages: []tokenizer.Message{user("x")}}},
		{"metadata ignored", `{"metadata":{"source":"web","a":1},"messages":[{"role":"user","content":"x"}]}`,
			tokenizer.Conversation{Messages: []tokenizer.Message{user("x")}}},
		{"text parts", `[{"role":"user","content":[{"type":"text","text":"a "},{"type":"text","text":"b"}]}]`,
			tokenizer.Conversation{Messages: []tokenizer.Message{user("a b")}}},
		{"null content", `[{"role":"assistant","content":null}]`,
			tokenizer.Conversation{Messages: []tokenizer.Message{asst("")}}},
		{"reasoning_content", `[{"role":"assistant","reasoning_content":"r","content":"c"}]`,
			tokenizer.Conversation{Messages: []tokenizer.Message{{Role: "assistant", Reasoning: "r", Content: "c"}}}},
		{"reasoning", `[{"role":"assistant","reasoning":"r","content":"c"}]`,
			tokenizer.Conversation{Messages: []tokenizer.Message{{Role: "assistant", Reasoning: "r", Content: "c"}}}},
		{"thinking key", `[{"role":"assistant","thinking":"r","content":"c"}]`,
			tokenizer.Conversation{Messages: []tokenizer.Message{{Role: "assistant", Reasoning: "r", Content: "c"}}}},
		{"same reasoning twice", `[{"role":"assistant","reasoning":"r","reasoning_content":"r"}]`,
			tokenizer.Conversation{Messages: []tokenizer.Message{{Role: "assistant", Reasoning: "r"}}}},
		{"tool call object args", `[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":{"b": 2, "a": [1, 2]}}}]},{"role":"tool","tool_call_id":"c1","name":"f","content":"ok"}]`,
			tokenizer.Conversation{Messages: []tokenizer.Message{
				{Role: "assistant", ToolCalls: []tokenizer.ToolCall{{ID: "c1", Name: "f", Arguments: `{"b":2,"a":[1,2]}`}}},
				{Role: "tool", ToolCallID: "c1", Name: "f", Content: "ok"}}}},
		{"tool call string args verbatim", `[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{\"a\": 1}"}}]}]`,
			tokenizer.Conversation{Messages: []tokenizer.Message{
				{Role: "assistant", ToolCalls: []tokenizer.ToolCall{{Name: "f", Arguments: `{"a": 1}`}}}}}},
		// Notepad saves UTF-8 with a byte-order mark: it marks the file's encoding and is not JSON.
		{"byte-order mark", "\xef\xbb\xbf" + `{"messages":[{"role":"user","content":"x"}]}`,
			tokenizer.Conversation{Messages: []tokenizer.Message{user("x")}}},
		{"tool call flat, no args", `[{"role":"assistant","tool_calls":[{"id":"c","name":"f"}]}]`,
			tokenizer.Conversation{Messages: []tokenizer.Message{
				{Role: "assistant", ToolCalls: []tokenizer.ToolCall{{ID: "c", Name: "f", Arguments: "{}"}}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadJSONL(strings.NewReader(tt.line+"\n"), "t.jsonl")
			if err != nil {
				t.Fatal(err)
			}
			if tt.want.ID == "" {
				tt.want.ID = "line:1" // the line number, as datasets.Entry.Name
			}
			if len(got) != 1 || !reflect.DeepEqual(got[0], tt.want) {
				t.Errorf("(-want +got):\n-%+v\n+%+v", tt.want, got)
			}
		})
	}
}

func TestReadJSONLErrors(t *testing.T) {
	const ok = `{"messages":[{"role":"user","content":"fine"}]}`
	tests := []struct {
		name      string
		input     string
		wantLine  int
		wantField string
		wantMsg   string
	}{
		{"unknown role", ok + "\n" + `{"messages":[{"role":"user","content":"a"},{"role":"bot","content":"b"}]}`,
			2, "messages[1].role", `unknown role "bot"`},
		{"missing role", `[{"content":"a"}]`, 1, "messages[0].role", "missing"},
		{"role not string", `[{"role":3}]`, 1, "messages[0].role", "want a string, got a number"},
		{"not json", ok + "\n\n" + `{"messages": [`, 3, "", "want a JSON object"},
		{"syntax error placed", `{"messages": ]}`, 1, "", "invalid character ']' looking for beginning of value (byte 14 of the conversation's JSON text)"},
		{"no messages key", `{"id":"x"}`, 1, "messages", "missing"},
		{"empty messages", `{"messages":[]}`, 1, "messages", "no messages"},
		// A value of the wrong JSON type is named in JSON's terms, not encoding/json's Go types
		// ("cannot unmarshal string into Go value of type []json.RawMessage").
		{"messages not array", `{"messages":"hi"}`, 1, "messages", "want an array of messages, got a string"},
		{"line a number", ok + "\n5", 2, "", `want a JSON object with "messages" or an array of messages, got a number`},
		{"line a string", `"hi"`, 1, "", `want a JSON object with "messages" or an array of messages, got a string`},
		{"line null", `null`, 1, "", `want a JSON object with "messages" or an array of messages, got null`},
		{"byte-order mark inside", ok + "\n\xef\xbb\xbf" + ok, 2, "", "starts with a UTF-8 byte-order mark (U+FEFF)"},
		{"message not object", `[1]`, 1, "messages[0]", "want a message object"},
		{"image part", `[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]`,
			1, "messages[0].content[0].type", `"image_url" is not supported`},
		{"content number", `[{"role":"user","content":7}]`, 1, "messages[0].content", "want a string or a list"},
		{"conflicting reasoning", `[{"role":"assistant","reasoning_content":"a","thinking":"b"}]`,
			1, "messages[0].thinking", "differs"},
		{"reasoning on user", `[{"role":"user","content":"a","reasoning":"r"}]`,
			1, "messages[0].reasoning_content", "only assistant"},
		{"tool calls on user", `[{"role":"user","tool_calls":[{"function":{"name":"f"}}]}]`,
			1, "messages[0].tool_calls", "only assistant"},
		{"tool call type", `[{"role":"assistant","tool_calls":[{"type":"code","function":{"name":"f"}}]}]`,
			1, "messages[0].tool_calls[0].type", `"code" is not supported`},
		{"tool call no name", `[{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}}]}]`,
			1, "messages[0].tool_calls[0].function.name", "missing"},
		{"tool call bad args", `[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":[1]}}]}]`,
			1, "messages[0].tool_calls[0].function.arguments", "want a JSON string or object"},
		{"thinking string", `{"thinking":"yes","messages":[{"role":"user"}]}`, 1, "thinking", "want true or false"},
		{"bad effort", `{"thinking_effort":"extreme","messages":[{"role":"user"}]}`, 1, "thinking_effort", "not one of"},
		// Unknown keys: a misspelled "content" became an empty turn, a misspelled "thinking" an unset mode.
		{"misspelled content", ok + "\n" + `{"thinking":false,"messages":[{"role":"user","contnet":"Hi"}]}`,
			2, "messages[0]", `unknown key "contnet" (want role, content, reasoning_content, reasoning, thinking, name, tool_call_id, tool_calls)`},
		{"misspelled thinking", `{"thinkng":true,"messages":[{"role":"user","content":"x"}]}`,
			1, "", `unknown key "thinkng" (want messages, id, thinking, thinking_effort, add_generation_prompt, metadata)`},
		{"unknown tool call key", `[{"role":"assistant","tool_calls":[{"function":{"name":"f","argument":"{}"}}]}]`,
			1, "messages[0].tool_calls[0].function", `unknown key "argument" (want name, arguments)`},
		{"unknown part key", `[{"role":"user","content":[{"type":"text","txt":"a"}]}]`,
			1, "messages[0].content[0]", `unknown key "txt" (want type, text)`},
		// Bytes that are not UTF-8 would be scored as U+FFFD, text the file does not hold.
		{"invalid utf-8", ok + "\n" + "{\"messages\":[{\"role\":\"user\",\"content\":\"caf\xe9\"}]}",
			2, "", "not valid UTF-8 (byte 43 of the conversation's JSON text)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadJSONL(strings.NewReader(tt.input), "data/chats.jsonl")
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("want *Error, got %v", err)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not match ErrInvalid")
			}
			if e.File != "data/chats.jsonl" || e.Line != tt.wantLine || e.Field != tt.wantField {
				t.Errorf("where: want data/chats.jsonl line %d field %q, got %s line %d field %q",
					tt.wantLine, tt.wantField, e.File, e.Line, e.Field)
			}
			msg := err.Error()
			want := fmt.Sprintf("datasets: data/chats.jsonl line %d: ", tt.wantLine)
			if !strings.HasPrefix(msg, want) || !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("message: want prefix %q and %q, got %q", want, tt.wantMsg, msg)
			}
		})
	}
}

func TestReadJSONLBlankLinesAndLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.jsonl")
	data := "\n" + `[{"role":"user","content":"a"}]` + "\n   \n" + `[{"role":"user","content":"b"}]` // no final newline
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, load := range []func(string) ([]tokenizer.Conversation, error){LoadJSONL, Load} {
		got, err := load(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[1].Messages[0].Content != "b" {
			t.Errorf("got %+v", got)
		}
	}
	if _, err := Load(filepath.Join(dir, "c.csv")); err == nil || !strings.Contains(err.Error(), "unknown extension") {
		t.Errorf("Load .csv: want unknown extension error, got %v", err)
	}
	if _, err := LoadJSONL(filepath.Join(dir, "missing.jsonl")); err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("missing file: want an I/O error that is not ErrInvalid, got %v", err)
	}
}

func TestLoadJSON(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, data string
		want       int    // conversations, when no error
		wantErr    string // error text, when one
	}{
		{"array of objects", "[\n  {\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]},\n  {\"messages\": [{\"role\": \"user\", \"content\": \"b\"}]}\n]", 2, ""},
		{"array of message arrays", `[[{"role":"user","content":"a"}], [{"role":"user","content":"b"}], [{"role":"user","content":"c"}]]`, 3, ""},
		{"one JSONL line of messages", `[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]`, 1, ""},
		{"byte-order mark", "\xef\xbb\xbf" + `[{"messages":[{"role":"user","content":"a"}]}]`, 1, ""},
		{"byte-order mark, one JSONL line", "\xef\xbb\xbf" + `{"messages":[{"role":"user","content":"a"}]}`, 1, ""},
		{"bad item", `[{"messages":[{"role":"user"}]}, {"messages":[{"role":"robot"}]}]`, 0,
			`x.json item 2: messages[0].role: unknown role "robot"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "x.json")
			if err := os.WriteFile(path, []byte(tt.data), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := Load(path)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("want an error containing %q, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil || len(got) != tt.want {
				t.Errorf("want %d conversations, got %d (%v)", tt.want, len(got), err)
			}
			if entries, err := LoadEntries(path); err != nil || len(entries) != tt.want { // a dataset job's reader
				t.Errorf("LoadEntries: want %d conversations, got %d (%v)", tt.want, len(entries), err)
			}
		})
	}
	if _, err := ReadJSON(strings.NewReader("{"), "y.json"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "y.json: want a JSON array") {
		t.Errorf("not an array: %v", err)
	}
}

func TestSetThinking(t *testing.T) {
	convs := []tokenizer.Conversation{{Thinking: tokenizer.ThinkingUnset}, {Thinking: tokenizer.ThinkingOn}, {}}
	if n := SetThinking(convs, tokenizer.ThinkingOff); n != 2 {
		t.Errorf("set %d, want 2", n)
	}
	want := []tokenizer.Thinking{tokenizer.ThinkingOff, tokenizer.ThinkingOn, tokenizer.ThinkingOff}
	for i, c := range convs {
		if c.Thinking != want[i] {
			t.Errorf("conversation %d: want %v, got %v", i, want[i], c.Thinking)
		}
	}
}

func TestExamples(t *testing.T) {
	convs, err := ReadJSONL(strings.NewReader(string(ExamplesJSONL())), "examples.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if got := Examples(); !reflect.DeepEqual(got, convs) || len(got) < 10 || len(got) > 20 {
		t.Fatalf("Examples: %d conversations, want 10-20 equal to the parsed file", len(got))
	}
	// The light reader a notebook cell uses (no Parquet linked) agrees with the strict one.
	if light := examples.All(); !reflect.DeepEqual(light, convs) {
		t.Errorf("examples.All() differs from ReadJSONL of the same file:\n%+v\nwant\n%+v", light, convs)
	}
	// The set promises a tool call, reasoning, Chinese text, and an explicit thinking mode on every line.
	var tool, reasoning, chinese bool
	ids := map[string]bool{}
	for _, c := range convs {
		if c.Thinking == tokenizer.ThinkingUnset {
			t.Errorf("%s: thinking unset", c.ID)
		}
		if c.ID == "" || ids[c.ID] {
			t.Errorf("id %q empty or repeated", c.ID)
		}
		ids[c.ID] = true
		for _, m := range c.Messages {
			tool = tool || len(m.ToolCalls) > 0
			reasoning = reasoning || m.Reasoning != ""
			chinese = chinese || strings.ContainsRune(m.Content, '的')
		}
	}
	if !tool || !reasoning || !chinese {
		t.Errorf("examples lack: tool call %v, reasoning %v, Chinese %v", tool, reasoning, chinese)
	}
	Examples()[0].Messages[0].Content = "changed"
	if Examples()[0].Messages[0].Content == "changed" {
		t.Errorf("Examples shares its result between calls")
	}
}
