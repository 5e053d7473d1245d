package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// A conversation past the limit is refused where rendering passed it, whatever makes it long: 100,000
// empty turns (no content to count: before, only content and reasoning were counted before rendering,
// so these were rendered whole, about 900,000 tokens, then refused), tool calls, a name, and the
// thinking-effort message that comes before every message.
func TestConversationLimitStopsRendering(t *testing.T) {
	ts := startServer(t, Config{Limits: api.Limits{MaxSequenceTokens: 20, MaxRequestTokens: 30, MaxSequences: 4, MaxTopK: 50}}, testHooks{})
	turns := strings.TrimSuffix(strings.Repeat(`{"role": "user"}, `, 100_000), ", ")
	call := `{"function": {"name": "f", "arguments": "{}"}}`
	calls := strings.TrimSuffix(strings.Repeat(call+", ", 50), ", ")
	conv := func(c string) string { return `{"inputs": [{"conversation": ` + c + `}], "thinking": false}` }
	for _, tt := range []struct {
		name, body, want string
	}{
		{"100,000 empty turns", conv(`{"messages": [` + turns + `]}`),
			"inputs[0] has more than 20 tokens (counting stopped in messages[1]): the limit is 20 (--max-tokens)"},
		{"tool calls", conv(`{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [` + calls + `]}]}`),
			"inputs[0] has more than 20 tokens (counting stopped in messages[1]): the limit is 20 (--max-tokens)"},
		{"a long name", conv(`{"messages": [{"role": "user", "name": "` + strings.Repeat("n ", 5000) + `"}]}`),
			"inputs[0] has more than 20 tokens (counting stopped in messages[0]): the limit is 20 (--max-tokens)"},
		{"the effort message", `{"inputs": [{"conversation": {"messages": [{"role": "user", "content": "q"}], "thinking": true, "thinking_effort": "high"}}]}`,
			"inputs[0] has more than 20 tokens (counting stopped outside the messages): the limit is 20 (--max-tokens)"},
		{"past what is left of the request", `{"inputs": [{"tokens": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}, {"conversation": {"messages": [` + turns + `]}}], "thinking": false}`,
			"the request has more than 30 tokens (inputs[0..1], counting stopped in messages[1]): the limit is 30 (--max-request-tokens)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body := ts.do(t, "POST", api.PathJobs, tt.body)
			var e api.Error
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("%d, body %q is not an api.Error: %v", code, body, err)
			}
			if code != 413 || e.Error != tt.want {
				t.Errorf("(-want +got):\n-413 %s\n+%d %s", tt.want, code, e.Error)
			}
		})
	}
	if len(ts.jobs) != 0 {
		t.Errorf("%d jobs queued by refused requests", len(ts.jobs))
	}
}
