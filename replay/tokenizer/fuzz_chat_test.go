package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

// FuzzEncodeConversationLimit: for any conversation and limit, the bounded renderer agrees with the
// whole one: the same error for an invalid conversation; within the limit the same tokens (id, message
// and channel); past it a prefix of them longer than the limit, with false. Messages are the input's
// pieces between NUL bytes, alternating user and assistant (flags: thinking, reasoning on assistant
// turns, a tool call on them, a system message first, an effort, the generation prompt).
func FuzzEncodeConversationLimit(f *testing.F) {
	f.Add("Hello\x00Hi there, how can I help?\x00<|open|>user", uint16(5), uint8(0))
	f.Add("one\x00two\x00three", uint16(0), uint8(0xff))
	f.Add("", uint16(3), uint8(1))
	f.Add("你好世界\x00  \r\n\t x\x00\xff\xfe", uint16(40), uint8(0x2a))
	f.Fuzz(func(t *testing.T, in string, limit uint16, flags uint8) {
		fuzzTokOnce.Do(func() { fuzzTok, fuzzTokErr = Builtin(3072) })
		if fuzzTokErr != nil {
			t.Fatal(fuzzTokErr)
		}
		c := Conversation{Thinking: ThinkingOff, GenerationPrompt: flags&32 != 0}
		if flags&1 != 0 {
			c.Thinking = ThinkingOn
		}
		if flags&16 != 0 {
			c.Effort = "high"
		}
		if flags&8 != 0 {
			c.Messages = append(c.Messages, Message{Role: RoleSystem, Content: "be brief"})
		}
		for i, s := range strings.Split(in, "\x00") {
			m := Message{Role: RoleUser, Content: s}
			if i%2 == 1 {
				m.Role = RoleAssistant
				if flags&2 != 0 && c.Thinking == ThinkingOn {
					m.Reasoning = "thinking about " + s
				}
				if flags&4 != 0 {
					m.ToolCalls = []ToolCall{{ID: "c1", Name: "lookup", Arguments: `{"q": "` + s + `"}`}}
				}
			}
			c.Messages = append(c.Messages, m)
		}
		full, ferr := fuzzTok.EncodeConversation(c)
		got, ok, err := fuzzTok.EncodeConversationLimit(c, int(limit))
		if ferr != nil || err != nil {
			if ferr == nil || err == nil || ferr.Error() != err.Error() {
				t.Fatalf("errors differ: whole %v, bounded %v", ferr, err)
			}
			return
		}
		switch {
		case ok != (len(full) <= int(limit)):
			t.Fatalf("limit %d, %d tokens whole: ok = %v", limit, len(full), ok)
		case ok && !slices.Equal(got, full):
			t.Fatalf("within the limit the tokens differ: %v, want %v", got, full)
		case !ok && (len(got) <= int(limit) || len(got) > len(full) || !slices.Equal(got, full[:len(got)])):
			t.Fatalf("past limit %d: %d tokens, not a prefix of the %d whole ones longer than the limit", limit, len(got), len(full))
		}
	})
}
