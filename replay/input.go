package replay

import (
	"errors"
	"fmt"
	"math"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// FromTokens makes a sequence of tokenizer output, with each token's piece, message and channel.
func FromTokens(tok *tokenizer.Tokenizer, toks []tokenizer.Token) Sequence {
	s := Sequence{
		Tokens:   make([]int32, len(toks)),
		Pieces:   make([]string, len(toks)),
		Messages: make([]int32, len(toks)),
		Channels: make([]string, len(toks)),
	}
	for i, t := range toks {
		s.Tokens[i], s.Pieces[i] = t.ID, tok.Piece(t.ID)
		s.Messages[i], s.Channels[i] = int32(t.Message), string(t.Channel)
	}
	return s
}

// FromText tokenizes raw text (special-token names are plain text) into a sequence.
func FromText(tok *tokenizer.Tokenizer, text string) (Sequence, error) {
	toks := tok.EncodeText(text, false)
	if len(toks) == 0 {
		return Sequence{}, fmt.Errorf("text: it encodes to no tokens")
	}
	return FromTokens(tok, toks), nil
}

// ErrTooManyTokens is returned (wrapped, naming the limit) by FromTextLimit and FromConversationLimit
// for an input past its limit.
var ErrTooManyTokens = errors.New("replay: too many tokens")

// FromTextLimit is FromText for a text of at most limit tokens: past that it stops tokenizing and returns
// an error wrapping ErrTooManyTokens, having held no more than limit ids.
func FromTextLimit(tok *tokenizer.Tokenizer, text string, limit int) (Sequence, error) {
	toks, ok := tok.EncodeTextLimit(text, false, limit)
	if !ok {
		return Sequence{}, fmt.Errorf("text: more than %d tokens (tokenizing stopped there): %w", limit, ErrTooManyTokens)
	}
	if len(toks) == 0 {
		return Sequence{}, fmt.Errorf("text: it encodes to no tokens")
	}
	return FromTokens(tok, toks), nil
}

// FromConversation renders a conversation with the K3 chat format into a sequence. The conversation's
// thinking mode must be set. The sequence's Conversation is c.ID and its Thinking the mode ("on", "off").
func FromConversation(tok *tokenizer.Tokenizer, c tokenizer.Conversation) (Sequence, error) {
	return FromConversationLimit(tok, c, math.MaxInt)
}

// FromConversationLimit is FromConversation for a conversation of at most limit tokens: past that it
// stops rendering (tokenizer.EncodeConversationLimit) and returns a *TooManyTokensError, which wraps
// ErrTooManyTokens, naming the limit and the message where rendering stopped.
func FromConversationLimit(tok *tokenizer.Tokenizer, c tokenizer.Conversation, limit int) (Sequence, error) {
	toks, ok, err := tok.EncodeConversationLimit(c, limit)
	if err != nil {
		return Sequence{}, err
	}
	if !ok {
		e := &TooManyTokensError{Limit: limit, Message: -1}
		if len(toks) > 0 {
			e.Message = toks[len(toks)-1].Message
		}
		return Sequence{}, e
	}
	s := FromTokens(tok, toks)
	s.Conversation, s.Thinking = c.ID, ThinkingName(c.Thinking)
	return s, nil
}

// TooManyTokensError is FromConversationLimit's error for a conversation past its limit: the limit and
// the index of the message in which rendering stopped, or -1 for markup outside the messages (the
// thinking-effort message, the generation prompt). It wraps ErrTooManyTokens.
type TooManyTokensError struct {
	Limit, Message int
}

func (e *TooManyTokensError) Error() string {
	where := "outside the messages"
	if e.Message >= 0 {
		where = fmt.Sprintf("in message %d", e.Message)
	}
	return fmt.Sprintf("conversation: more than %d tokens (rendering stopped %s): %v", e.Limit, where, ErrTooManyTokens)
}

func (e *TooManyTokensError) Unwrap() error { return ErrTooManyTokens }

// ThinkingName is the spelling of a thinking mode in results and messages: "on", "off", or "" unset.
func ThinkingName(t tokenizer.Thinking) string {
	switch t {
	case tokenizer.ThinkingOn:
		return "on"
	case tokenizer.ThinkingOff:
		return "off"
	}
	return ""
}

// FromIDs makes a sequence of token ids, with pieces when a tokenizer is at hand (tok may be nil).
func FromIDs(tok *tokenizer.Tokenizer, ids []int32) Sequence {
	s := Sequence{Tokens: ids}
	if tok != nil {
		s.Pieces = make([]string, len(ids))
		for i, id := range ids {
			s.Pieces[i] = tok.Piece(id)
		}
	}
	return s
}
