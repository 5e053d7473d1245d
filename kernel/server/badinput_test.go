package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// More hostile and malformed requests than TestBadRequests and TestLimits: malformed conversations,
// numbers that do not fit, nesting bombs, stray bytes around the object, text that tokenizes past a
// limit. Each is refused before anything is queued, with the status and a message naming the field.
func TestHostileRequests(t *testing.T) {
	ts := startServer(t, Config{Limits: api.Limits{MaxSequenceTokens: 20, MaxRequestTokens: 30, MaxSequences: 4, MaxTopK: 50}}, testHooks{})
	conv := func(c string) string { return `{"inputs": [{"conversation": ` + c + `}], "thinking": false}` }
	tests := []struct {
		name, body string
		code       int
		want       string
	}{
		{"message without role", conv(`{"messages": [{"content": "x"}]}`), 400, "inputs[0].conversation.messages[0].role: missing"},
		{"content of wrong type", conv(`{"messages": [{"role": "user", "content": 5}]}`), 400,
			"inputs[0].conversation.messages[0].content: want a string or a list of text parts"},
		{"messages not a list", conv(`{"messages": "x"}`), 400, "inputs[0].conversation.messages: want an array of messages"},
		{"no messages key", conv(`{"id": "x"}`), 400, "inputs[0].conversation.messages: missing"},
		{"unknown conversation key", conv(`{"turns": []}`), 400, `inputs[0].conversation: unknown key "turns" (want messages, id, thinking, thinking_effort, add_generation_prompt, metadata)`},
		{"misspelled content", conv(`{"messages": [{"role": "user", "contnet": "Hi"}]}`), 400,
			`inputs[0].conversation.messages[0]: unknown key "contnet" (want role, content,`},
		{"thinking conflicting with the request's", `{"inputs": [{"conversation": {"messages": [{"role": "user", "content": "x"}], "thinking": true}}], "thinking": false}`, 400,
			`inputs[0].conversation.thinking: true conflicts with the request's "thinking": false: remove one of them`},
		{"message not an object", conv(`[7]`), 400, "inputs[0].conversation.messages[0]: want a message object"},
		{"thinking not a bool", `{"inputs": [{"conversation": {"messages": [{"role": "user", "content": "x"}], "thinking": "yes"}}]}`, 400,
			"inputs[0].conversation.thinking: want true or false"},
		{"unknown effort", `{"inputs": [{"conversation": {"messages": [{"role": "user", "content": "x"}], "thinking": true, "thinking_effort": "extreme"}}]}`, 400,
			`inputs[0].conversation.thinking_effort: "extreme" is not one of`},
		{"reasoning on a user message", conv(`{"messages": [{"role": "user", "content": "x", "reasoning_content": "r"}]}`), 400,
			"inputs[0].conversation.messages[0].reasoning_content: only assistant messages have reasoning"},
		{"reasoning with thinking off", conv(`{"messages": [{"role": "assistant", "content": "x", "reasoning_content": "r"}]}`), 400,
			"reasoning given but thinking is off"},
		{"image part", conv(`{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}`), 400,
			`inputs[0].conversation.messages[0].content[0].type: part of type "image_url" is not supported`},
		{"tool calls on a user message", conv(`{"messages": [{"role": "user", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}]}`), 400,
			"only assistant messages make tool calls"},
		{"token id not an integer", `{"inputs": [{"tokens": [1.5]}]}`, 400, "inputs[0].tokens[0]: 1.5 is not an integer from -2147483648 to 2147483647"},
		{"token id past int32", `{"inputs": [{"tokens": [4294967296]}]}`, 400, "inputs[0].tokens[0]: 4294967296 is not an integer from -2147483648 to 2147483647"},
		{"top_k not an integer", `{"inputs": [{"tokens": [1]}], "options": {"top_k": 2.5}}`, 400, "options.top_k: 2.5 is not an integer from"},
		{"top_k 1e30", `{"inputs": [{"tokens": [1]}], "options": {"top_k": 1e30}}`, 400, "options.top_k: 1e30 is not an integer from"},
		{"layer past int64", `{"inputs": [{"tokens": [1]}], "options": {"lens": [99999999999999999999]}}`, 400, "options.lens[0]: 99999999999999999999 is not an integer from"},
		{"huge layer", `{"inputs": [{"tokens": [1]}], "options": {"hidden": [9223372036854775807]}}`, 400,
			"options.hidden[0]: layer 9223372036854775807 outside 0..7"},
		{"inputs not a list", `{"inputs": {"tokens": [1]}}`, 400, "inputs: want an array, got an object"},
		{"an input at the top level", `{"text": "hi"}`, 400, `unknown field "text" (inputs go in a list: {"inputs": [{"text": ...}], "options": {...}})`},
		{"lens as a word", `{"inputs": [{"tokens": [1]}], "options": {"lens": "all"}}`, 400, `options.lens: want an array, got a string (a list of layers, such as [0, 3]; "lens_all": true for every layer)`},
		{"a string among the ids", `{"inputs": [{"tokens": [1]}, {"tokens": [1, 2, "3"]}]}`, 400, "inputs[1].tokens[2]: want an integer, got a string"},
		{"router not a bool", `{"inputs": [{"tokens": [1]}], "options": {"router": 1}}`, 400, "options.router: want true or false, got a number"},
		{"nesting bomb", strings.Repeat("[", 20000), 400, "exceeded max depth"},
		{"deep conversation", conv(`{"messages": [{"role": "user", "content": "x", "meta": ` + strings.Repeat(`{"a":`, 11000) + `1` + strings.Repeat(`}`, 11000) + `}]}`),
			400, "exceeded max depth"},
		{"trailing NUL", `{"inputs": [{"tokens": [1]}]}` + "\x00", 400, "data after the request object"},
		{"trailing brace", `{"inputs": [{"tokens": [1]}]}}`, 400, "data after the request object"},
		{"two objects", `{"inputs": [{"tokens": [1]}]}{"inputs": [{"tokens": [1]}]}`, 400, "data after the request object"},
		{"byte order mark", "\xef\xbb\xbf" + `{"inputs": [{"tokens": [1]}]}`, 400, "malformed request JSON"},
		{"empty body", ``, 400, "malformed request JSON"},
		{"not an object", `[{"tokens": [1]}]`, 400, "malformed request JSON"},
		{"text past --max-tokens once tokenized", `{"inputs": [{"text": "` + strings.Repeat("word ", 12) + `"}]}`, 413,
			"inputs[0] has more than 20 tokens (tokenizing stopped there): the limit is 20 (--max-tokens)"},
		{"text past what is left of --max-request-tokens", `{"inputs": [{"tokens": [1,2,3,4,5,6,7,8,9,10]}, {"tokens": [1,2,3,4,5,6,7,8,9,10]}, {"text": "` + strings.Repeat("word ", 12) + `"}]}`, 413,
			"the request has more than 30 tokens (inputs[0..2], tokenizing stopped there): the limit is 30 (--max-request-tokens)"},
		{"conversation past --max-tokens while counted", conv(`{"messages": [{"role": "user", "content": "` + strings.Repeat("word ", 30) + `"}]}`), 413,
			"inputs[0] has more than 20 tokens (counting stopped in messages[0]): the limit is 20 (--max-tokens)"},
		{"conversation past --max-tokens once rendered", conv(`{"messages": [{"role": "user", "content": "` + strings.Repeat("ab ", 9) + `"}]}`), 413,
			"(--max-tokens)"},
		{"three inputs past --max-request-tokens", `{"inputs": [{"tokens": [1,2,3,4,5,6,7,8,9,10]}, {"tokens": [1,2,3,4,5,6,7,8,9,10]}, {"tokens": [1,2,3,4,5,6,7,8,9,10,11]}]}`,
			413, "(--max-request-tokens)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := ts.do(t, "POST", api.PathJobs, tt.body)
			var e api.Error
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("%d, body %q is not an api.Error: %v", code, body, err)
			}
			if code != tt.code || !strings.Contains(e.Error, tt.want) {
				t.Errorf("(-want +got):\n-%d …%s…\n+%d %s", tt.code, tt.want, code, e.Error)
			}
		})
	}
	if len(ts.jobs) != 0 {
		t.Errorf("%d jobs queued by refused requests", len(ts.jobs))
	}

	// Accepted on purpose: a message without content is an empty turn (the chat shape's own JSON omits
	// empty content), text with special-token names is plain text, a lone surrogate escape is U+FFFD.
	for _, body := range []string{
		conv(`{"messages": [{"role": "user"}]}`),
		`{"inputs": [{"text": "<|im_end|><|im_user|>"}]}`,
		`{"inputs": [{"text": "\ud800"}]}`,
	} {
		if code, data := ts.do(t, "POST", api.PathJobs, body); code != http.StatusAccepted {
			t.Errorf("%s: %d %s, want 202", body, code, data)
		}
	}
}
