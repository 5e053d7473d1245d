package replay

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// FromConversationLimit within its limit is FromConversation; past it, it is a *TooManyTokensError that
// wraps ErrTooManyTokens and names the limit and the message where rendering stopped; an invalid
// conversation is the tokenizer's error, whatever the limit.
func TestFromConversationLimit(t *testing.T) {
	tok, err := tokenizer.Builtin(3072)
	if err != nil {
		t.Fatal(err)
	}
	c := tokenizer.Conversation{ID: "c", Thinking: tokenizer.ThinkingOn, Effort: "low", GenerationPrompt: true, Messages: []tokenizer.Message{
		{Role: tokenizer.RoleUser, Content: "Hello there"},
		{Role: tokenizer.RoleAssistant, Reasoning: "Greet.", Content: "Hi!"},
	}}
	want, err := FromConversation(tok, c)
	if err != nil {
		t.Fatal(err)
	}
	n := len(want.Tokens)
	for _, limit := range []int{n, n + 1} {
		got, err := FromConversationLimit(tok, c, limit)
		if err != nil || got.Conversation != "c" || got.Thinking != "on" || !slices.Equal(got.Tokens, want.Tokens) ||
			!slices.Equal(got.Pieces, want.Pieces) || !slices.Equal(got.Messages, want.Messages) || !slices.Equal(got.Channels, want.Channels) {
			t.Errorf("limit %d (of %d): -want %+v +got %+v, %v", limit, n, want, got, err)
		}
	}
	// The token past the limit is want's token limit, and a piece lies in one message: the error names
	// that token's message.
	mid := int(want.Messages[n/2])
	for _, tt := range []struct {
		limit int
		text  string
	}{
		{0, "conversation: more than 0 tokens (rendering stopped outside the messages): replay: too many tokens"}, // the effort message comes first
		{n / 2, fmt.Sprintf("more than %d tokens (rendering stopped in message %d)", n/2, mid)},
		{n - 1, "(rendering stopped outside the messages)"}, // the generation prompt comes last
	} {
		_, err := FromConversationLimit(tok, c, tt.limit)
		var e *TooManyTokensError
		if !errors.Is(err, ErrTooManyTokens) || !errors.As(err, &e) || e.Limit != tt.limit || !strings.Contains(err.Error(), tt.text) {
			t.Errorf("limit %d: %v, want a TooManyTokensError containing %q", tt.limit, err, tt.text)
		}
	}
	if mid < 0 {
		t.Errorf("token %d of %d is outside the messages: the test means to stop inside one", n/2, n)
	}
	c.Effort = "extreme"
	if _, err := FromConversationLimit(tok, c, 0); err == nil || errors.Is(err, ErrTooManyTokens) || !strings.Contains(err.Error(), `thinking effort "extreme"`) {
		t.Errorf("invalid conversation: %v, want the tokenizer's error", err)
	}
}
