// Package examples holds the bundled example conversations: short, benign conversations written for this
// project, covering every channel of the chat format. It is the light half of package datasets (which
// reads Parquet, and so links arrow's compute and parquet packages into every program that imports it):
// a GoNB cell compiles the packages it imports into a new program each time, and this one adds nothing
// but the JSONL text and the tokenizer's Conversation type.
//
//	conv, err := examples.Get("greeting")
//
// kernel.Example(id) replays one by id. datasets.Examples parses the same text with the strict reader
// of package datasets; its test checks that both readings agree.
package examples

import (
	"bytes"
	_ "embed" // the bundled examples
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// ErrUnknown is matched (errors.Is) by Get's error for an id no bundled example has.
var ErrUnknown = errors.New("examples: no such example")

// examplesJSONL holds short, benign conversations written for this project: everyday questions, a little
// Go, Python and SQL, a recipe, a Chinese-English mixed exchange, a tool call with its result, and two
// turns with reasoning content. Each line says its thinking mode, so they replay without SetThinking.
//
//go:embed examples.jsonl
var examplesJSONL []byte

// line is one JSONL line in the shapes the bundled file uses: the common chat shape, where a content may
// also be a list of text parts and a tool call may nest its name and arguments (an object) under
// "function". datasets.ReadJSONL reads many more shapes, strictly; TestExamples in package datasets
// checks that this reading of the bundled file equals that one.
type line struct {
	ID       string        `json:"id"`
	Thinking *bool         `json:"thinking"`
	Effort   string        `json:"thinking_effort"`
	Messages []lineMessage `json:"messages"`
}

type lineMessage struct {
	Role       tokenizer.Role  `json:"role"`
	Content    json.RawMessage `json:"content"`
	Reasoning  string          `json:"reasoning_content"`
	Name       string          `json:"name"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// text is a content: a string, or the concatenated texts of a list of {"type":"text","text":...} parts.
func text(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// conversation converts a parsed line.
func (l line) conversation() (tokenizer.Conversation, error) {
	c := tokenizer.Conversation{ID: l.ID, Effort: l.Effort}
	switch {
	case l.Thinking == nil:
	case *l.Thinking:
		c.Thinking = tokenizer.ThinkingOn
	default:
		c.Thinking = tokenizer.ThinkingOff
	}
	for _, m := range l.Messages {
		content, err := text(m.Content)
		if err != nil {
			return c, err
		}
		msg := tokenizer.Message{Role: m.Role, Content: content, Reasoning: m.Reasoning, Name: m.Name, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			args := string(tc.Function.Arguments)
			if s, err := text(tc.Function.Arguments); err == nil && len(args) > 0 && args[0] == '"' {
				args = s // arguments already given as JSON text
			} else {
				var buf bytes.Buffer
				if err := json.Compact(&buf, tc.Function.Arguments); err != nil {
					return c, err
				}
				args = buf.String()
			}
			msg.ToolCalls = append(msg.ToolCalls, tokenizer.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: args})
		}
		c.Messages = append(c.Messages, msg)
	}
	return c, nil
}

// All returns every bundled example, in file order, freshly parsed (the caller may change them).
func All() []tokenizer.Conversation {
	var convs []tokenizer.Conversation
	for _, raw := range bytes.Split(examplesJSONL, []byte("\n")) {
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		var l line
		if err := json.Unmarshal(raw, &l); err != nil {
			return nil // unreachable: TestAll parses the same bytes
		}
		c, err := l.conversation()
		if err != nil {
			return nil
		}
		convs = append(convs, c)
	}
	return convs
}

// IDs lists the ids of the bundled examples, in file order.
func IDs() []string {
	var ids []string
	for _, c := range All() {
		ids = append(ids, c.ID)
	}
	return ids
}

// Get returns the bundled example called id; an unknown id is an error (matching ErrUnknown) that lists
// the ids there are.
func Get(id string) (tokenizer.Conversation, error) {
	all := All()
	if i := slices.IndexFunc(all, func(c tokenizer.Conversation) bool { return c.ID == id }); i >= 0 {
		return all[i], nil
	}
	return tokenizer.Conversation{}, fmt.Errorf("%w: %q (there are %s)", ErrUnknown, id, strings.Join(IDs(), ", "))
}

// JSONL returns the bundled examples as the JSONL text they are stored in.
func JSONL() []byte { return slices.Clone(examplesJSONL) }
