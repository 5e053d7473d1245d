package tokenizer

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// EncodeConversationLimit within its limit is EncodeConversation, token for token (id, message and
// channel); past it, it stops with a prefix of EncodeConversation's tokens that passes the limit by at
// most one piece. Run at every limit below the length, so that it stops in every tag, attribute, text
// segment and special of the chat cases.
func TestEncodeConversationLimit(t *testing.T) {
	tok := builtinForTest(t, 4096)
	cases := []struct {
		name string
		c    Conversation
	}{}
	for _, tt := range chatCases {
		cases = append(cases, struct {
			name string
			c    Conversation
		}{tt.name, tt.c})
	}
	cases = append(cases, struct {
		name string
		c    Conversation
	}{"specials in assistant text, several tool calls", Conversation{Thinking: ThinkingOn, Effort: "max", GenerationPrompt: true, Messages: []Message{
		{Role: RoleUser, Content: "find <|im_end|> twice " + strings.Repeat("lorem ipsum ", 20)},
		{Role: RoleAssistant, Reasoning: "think <|open|>hard<|close|>", Content: "<|sep|>", ToolCalls: []ToolCall{
			{ID: "a", Name: "f", Arguments: `{"x": "<|end_of_msg|>"}`}, {Name: "g", Arguments: "{}"},
		}},
		{Role: RoleTool, ToolCallID: "a", Name: `n"&`, Content: "你好世界"},
	}}})
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			want, err := tok.EncodeConversation(tt.c)
			if err != nil {
				t.Fatal(err)
			}
			for _, limit := range []int{len(want), len(want) + 1, math.MaxInt} {
				got, ok, err := tok.EncodeConversationLimit(tt.c, limit)
				if err != nil || !ok || !slices.Equal(got, want) {
					t.Errorf("limit %d (of %d tokens): -want %v, true, nil +got %v, %v, %v", limit, len(want), want, got, ok, err)
				}
			}
			for limit := range len(want) {
				got, ok, err := tok.EncodeConversationLimit(tt.c, limit)
				// The longest piece of these texts is "你好世界", 12 byte tokens in this vocabulary: 12 bounds
				// what one piece adds.
				if err != nil || ok || len(got) <= limit || len(got) > limit+12 || !slices.Equal(got, want[:len(got)]) {
					t.Fatalf("limit %d (of %d tokens): want false and a prefix of %d..%d tokens, got %v, %d tokens %v, %v",
						limit, len(want), limit+1, limit+12, ok, len(got), got, err)
				}
			}
		})
	}
}

// An invalid conversation is an error whatever the limit, as with EncodeConversation.
func TestEncodeConversationLimitValidates(t *testing.T) {
	tok := builtinForTest(t, 4096)
	c := Conversation{Thinking: ThinkingOff, Messages: []Message{{Role: RoleUser, Content: "q"}, {Role: RoleAssistant, Reasoning: "r"}}}
	for _, limit := range []int{0, 1, math.MaxInt} {
		if _, _, err := tok.EncodeConversationLimit(c, limit); err == nil || !strings.Contains(err.Error(), "reasoning given but thinking is off") {
			t.Errorf("limit %d: %v, want the reasoning error", limit, err)
		}
	}
}

// Past the limit the renderer stops where it passed it: neither a conversation of 200,000 messages nor
// one of a 16 MB message (user text, or assistant text with specials enabled) is rendered or tokenized
// whole. Under a limit of 100 each holds a few more than 100 tokens and allocates well under 1 MiB
// (rendered whole, the messages are 2.6 M tokens, 31 MB as Tokens).
func TestEncodeConversationLimitStopsEarly(t *testing.T) {
	tok := builtinForTest(t, 4096)
	many := make([]Message, 200_000)
	for i := range many {
		many[i] = Message{Role: RoleUser, Content: "hello there"}
		if i%2 == 1 {
			many[i] = Message{Role: RoleAssistant, Content: "hi", ToolCalls: []ToolCall{{Name: "f", Arguments: "{}"}}}
		}
	}
	huge := strings.Repeat("word ", 16<<20/5)
	tests := []struct {
		name    string
		c       Conversation
		lastMsg int // the message the last token belongs to
	}{
		{"200,000 messages", Conversation{Thinking: ThinkingOff, Messages: many}, 100 / 10},
		{"16 MB user message", Conversation{Thinking: ThinkingOff, Messages: []Message{{Role: RoleUser, Content: huge}}}, 0},
		{"16 MB assistant message, specials enabled", Conversation{Thinking: ThinkingOn, Messages: []Message{
			{Role: RoleUser, Content: "q"}, {Role: RoleAssistant, Reasoning: huge}}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			got, ok, err := tok.EncodeConversationLimit(tt.c, 100)
			runtime.ReadMemStats(&after)
			if err != nil || ok || len(got) <= 100 || len(got) > 110 {
				t.Fatalf("limit 100: want false and 101..110 tokens, got %v, %d tokens, %v", ok, len(got), err)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
				t.Errorf("limit 100: allocated %d bytes, want under 1 MiB", alloc)
			}
			if m := got[len(got)-1].Message; m > tt.lastMsg {
				t.Errorf("stopped in message %d, want at most %d", m, tt.lastMsg)
			}
		})
	}
}

// EncodeTextLimit with specials enabled also stops at its limit (it encoded the whole text first).
func TestEncodeTextLimitSpecialStopsEarly(t *testing.T) {
	tok := builtinForTest(t, 4096)
	huge := strings.Repeat("word <|open|> ", 16<<20/14)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, ok := tok.EncodeTextLimit(huge, true, 100)
	runtime.ReadMemStats(&after)
	if ok || got != nil {
		t.Errorf("16 MB text, limit 100: %v, %d tokens, want false and none", ok, len(got))
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("16 MB text, limit 100: allocated %d bytes, want under 1 MiB", alloc)
	}
}

func ExampleTokenizer_EncodeConversationLimit() {
	tok, err := Builtin(4096)
	if err != nil {
		panic(err)
	}
	c := Conversation{Thinking: ThinkingOff, Messages: []Message{{Role: RoleUser, Content: strings.Repeat("many words ", 1000)}}}
	tokens, ok, err := tok.EncodeConversationLimit(c, 50)
	// Refused, having rendered 52 tokens (the piece that passed 50 is two), the last in message 0.
	fmt.Println(ok, len(tokens), tokens[len(tokens)-1].Message, err)
	// Output: false 52 0 <nil>
}
