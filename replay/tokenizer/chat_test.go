package tokenizer

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// run is a stretch of consecutive tokens with the same message and channel, shown as decoded text.
type run struct {
	msg  int
	ch   Channel
	text string
}

func runs(t *testing.T, tok *Tokenizer, tokens []Token) []run {
	t.Helper()
	var out []run
	for i := 0; i < len(tokens); {
		j := i
		for j < len(tokens) && tokens[j].Message == tokens[i].Message && tokens[j].Channel == tokens[i].Channel {
			j++
		}
		text, err := tok.Decode(IDs(tokens[i:j]))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, run{tokens[i].Message, tokens[i].Channel, text})
		i = j
	}
	return out
}

const S = ChannelStructure

// chatCases are conversations with their rendering as runs, under builtinForTest(t, 4096); the bounded
// renderer's tests (chatlimit_test.go) run over them too.
var chatCases = []struct {
	name string
	c    Conversation
	want []run
}{
	{
		name: "user and assistant, thinking on, generation prompt",
		c: Conversation{Thinking: ThinkingOn, GenerationPrompt: true, Messages: []Message{
			{Role: RoleSystem, Content: "Be brief."},
			{Role: RoleUser, Content: "Hi <|open|>"},
			{Role: RoleAssistant, Reasoning: "Greet.", Content: "Hello!"},
			{Role: RoleUser, Content: "Again"},
		}},
		want: []run{
			{0, S, `<|open|>message role="system"<|sep|>`}, {0, ChannelSystem, "Be brief."},
			{0, S, "<|close|>message<|sep|><|end_of_msg|>"},
			{1, S, `<|open|>message role="user"<|sep|>`}, {1, ChannelUser, "Hi <|open|>"},
			{1, S, "<|close|>message<|sep|><|end_of_msg|>"},
			{2, S, `<|open|>message role="assistant"<|sep|><|open|>think<|sep|>`}, {2, ChannelThink, "Greet."},
			{2, S, "<|close|>think<|sep|><|open|>response<|sep|>"}, {2, ChannelResponse, "Hello!"},
			{2, S, "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"},
			{3, S, `<|open|>message role="user"<|sep|>`}, {3, ChannelUser, "Again"},
			{3, S, "<|close|>message<|sep|><|end_of_msg|>"},
			{-1, S, `<|open|>message role="assistant"<|sep|><|open|>think<|sep|>`},
		},
	},
	{
		name: "thinking off, empty reasoning and content",
		c: Conversation{Thinking: ThinkingOff, GenerationPrompt: true, Messages: []Message{
			{Role: RoleUser, Content: "x"},
			{Role: RoleAssistant},
		}},
		want: []run{
			{0, S, `<|open|>message role="user"<|sep|>`}, {0, ChannelUser, "x"},
			{0, S, "<|close|>message<|sep|><|end_of_msg|>"},
			{1, S, `<|open|>message role="assistant"<|sep|><|open|>response<|sep|><|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>`},
			{-1, S, `<|open|>message role="assistant"<|sep|><|open|>response<|sep|>`},
		},
	},
	{
		name: "effort after the leading system message, tools, escaping",
		c: Conversation{Thinking: ThinkingOn, Effort: "high", Messages: []Message{
			{Role: RoleSystem, Content: "sys"},
			{Role: RoleUser, Name: `a"b&c`, Content: "q"},
			{Role: RoleAssistant, Content: "ok", ToolCalls: []ToolCall{{ID: "c1", Name: "get", Arguments: `{"k":1}`}}},
			{Role: RoleTool, ToolCallID: "c1", Content: "<|sep|>42"},
		}},
		want: []run{
			{0, S, `<|open|>message role="system"<|sep|>`}, {0, ChannelSystem, "sys"},
			{0, S, "<|close|>message<|sep|><|end_of_msg|>"},
			{-1, S, `<|open|>message role="system" type="thinking-effort"<|sep|>`}, {-1, ChannelSystem, "high"},
			{-1, S, "<|close|>message<|sep|><|end_of_msg|>"},
			{1, S, `<|open|>message role="user" name="a&quot;b&amp;c"<|sep|>`}, {1, ChannelUser, "q"},
			{1, S, "<|close|>message<|sep|><|end_of_msg|>"},
			{2, S, `<|open|>message role="assistant"<|sep|><|open|>think<|sep|><|close|>think<|sep|><|open|>response<|sep|>`},
			{2, ChannelResponse, "ok"},
			{2, S, `<|close|>response<|sep|><|open|>tool_call name="get" id="c1"<|sep|>`}, {2, ChannelToolCall, `{"k":1}`},
			{2, S, "<|close|>tool_call<|sep|><|close|>message<|sep|><|end_of_msg|>"},
			{3, S, `<|open|>message role="tool" tool_call_id="c1"<|sep|>`}, {3, ChannelTool, "<|sep|>42"},
			{3, S, "<|close|>message<|sep|><|end_of_msg|>"},
		},
	},
	{
		name: "effort first without system messages",
		c:    Conversation{Thinking: ThinkingOn, Effort: "low", Messages: []Message{{Role: RoleUser, Content: "q"}}},
		want: []run{
			{-1, S, `<|open|>message role="system" type="thinking-effort"<|sep|>`}, {-1, ChannelSystem, "low"},
			{-1, S, "<|close|>message<|sep|><|end_of_msg|>"},
			{0, S, `<|open|>message role="user"<|sep|>`}, {0, ChannelUser, "q"},
			{0, S, "<|close|>message<|sep|><|end_of_msg|>"},
		},
	},
}

func TestEncodeConversation(t *testing.T) {
	tok := builtinForTest(t, 4096)
	for _, tt := range chatCases {
		t.Run(tt.name, func(t *testing.T) {
			tokens, err := tok.EncodeConversation(tt.c)
			if err != nil {
				t.Fatal(err)
			}
			got := runs(t, tok, tokens)
			if !slices.Equal(got, tt.want) {
				t.Errorf("runs:\n-want %s\n+got  %s", fmtRuns(tt.want), fmtRuns(got))
			}
		})
	}
}

func fmtRuns(rs []run) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "\n  {%d, %s, %q}", r.msg, r.ch, r.text)
	}
	return b.String()
}

// TestSegmentsEncodedApart checks the token ids of one open tag: each segment is encoded on its own, and
// a special name typed by the user stays text while the same text from the assistant is a special.
func TestSegmentsEncodedApart(t *testing.T) {
	tok := builtinForTest(t, 4096)
	id := func(name string) int32 { v, _ := tok.SpecialID(name); return v }
	tokens, err := tok.EncodeConversation(Conversation{Thinking: ThinkingOff, Messages: []Message{
		{Role: RoleUser, Content: "<|sep|>"},
		{Role: RoleAssistant, Content: "<|sep|>"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var want []int32
	want = append(want, id("<|open|>"))
	for _, seg := range []string{"message", " role", `="`, "user", `"`} {
		want = append(want, tok.Encode(seg)...)
	}
	want = append(want, id("<|sep|>"))
	want = append(want, tok.Encode("<|sep|>")...)
	if got := IDs(tokens[:len(want)]); !slices.Equal(got, want) {
		t.Errorf("user message start: -want %v +got %v", want, got)
	}
	var assistantSpecials int
	for _, tk := range tokens {
		if tk.Channel == ChannelResponse && tk.ID == id("<|sep|>") {
			assistantSpecials++
		}
		if tk.Channel == ChannelUser && tok.IsSpecial(tk.ID) {
			t.Errorf("user text produced special id %d", tk.ID)
		}
	}
	if assistantSpecials != 1 {
		t.Errorf("assistant <|sep|> text: %d special tokens, want 1", assistantSpecials)
	}
}

func TestEncodeConversationErrors(t *testing.T) {
	tok := builtinForTest(t, 4096)
	user := Message{Role: RoleUser, Content: "q"}
	tests := []struct {
		name string
		c    Conversation
		want string
	}{
		{"unset", Conversation{Messages: []Message{user}}, "thinking mode is unset"},
		{"bad role", Conversation{Thinking: ThinkingOn, Messages: []Message{{Role: "bot"}}}, `message 0 (bot): unknown role`},
		{"reasoning off", Conversation{Thinking: ThinkingOff, Messages: []Message{user, {Role: RoleAssistant, Reasoning: "r"}}}, "message 1 (assistant): reasoning given but thinking is off"},
		{"user tool call", Conversation{Thinking: ThinkingOn, Messages: []Message{{Role: RoleUser, ToolCalls: []ToolCall{{Name: "f"}}}}}, "only assistant messages"},
		{"tool call id", Conversation{Thinking: ThinkingOn, Messages: []Message{{Role: RoleUser, ToolCallID: "x"}}}, "only tool messages"},
		{"unnamed call", Conversation{Thinking: ThinkingOn, Messages: []Message{{Role: RoleAssistant, ToolCalls: []ToolCall{{}}}}}, "tool call 0 has no name"},
		{"bad effort", Conversation{Thinking: ThinkingOn, Effort: "huge"}, `thinking effort "huge"`},
		{"effort off", Conversation{Thinking: ThinkingOff, Effort: "low"}, "with thinking off"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tok.EncodeConversation(tt.c)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, err := tok.EncodeConversation(Conversation{}); !errors.Is(err, ErrThinkingUnset) {
		t.Errorf("unset thinking: %v, want ErrThinkingUnset", err)
	}
	plain := handVocab(t)
	cfg := &Config{Specials: make([]string, NumSpecials)}
	for i := range cfg.Specials {
		cfg.Specials[i] = reservedName(256 + i)
	}
	noChat, _ := New(plain.Tokens(), cfg)
	if _, err := noChat.EncodeConversation(Conversation{Thinking: ThinkingOn}); err == nil || !strings.Contains(err.Error(), "no <|open|> token") {
		t.Errorf("vocabulary without chat specials: %v", err)
	}
}

func TestEncodeText(t *testing.T) {
	tok := builtinForTest(t, 4096)
	for _, allow := range []bool{false, true} {
		tokens := tok.EncodeText("a<|open|>b", allow)
		specials := 0
		for _, tk := range tokens {
			if tk.Message != -1 || tk.Channel != ChannelText {
				t.Errorf("token %+v, want message -1 and channel text", tk)
			}
			if tok.IsSpecial(tk.ID) {
				specials++
			}
		}
		if want := map[bool]int{false: 0, true: 1}[allow]; specials != want {
			t.Errorf("allowSpecial %v: %d specials, want %d", allow, specials, want)
		}
	}
}
