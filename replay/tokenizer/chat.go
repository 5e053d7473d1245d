package tokenizer

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// The K3 chat format ("XTML", spec section 6), rendered segment by segment. Everything about the markup
// lives in this file so that a change of the official encoder is one edit here plus its tests.
//
// What the spec fixes: every structural token is a special id; every text piece (tag name, attribute
// key, `="`, value, `"`, content) is BPE-encoded on its own, so nothing merges across segments; user and
// tool text is encoded with specials disabled; open tag <|open|>name key="value"...<|sep|>, close tag
// <|close|>name<|sep|>; a message is <|open|>message role="R"<|sep|>BODY<|close|>message<|sep|><|end_of_msg|>;
// an assistant body is <|open|>think<|sep|>...<|close|>think<|sep|> (thinking mode only, always present)
// then <|open|>response<|sep|>...<|close|>response<|sep|>, then tool calls; the generation prompt is
// <|open|>message role="assistant"<|sep|> plus <|open|>think<|sep|> or <|open|>response<|sep|>.
//
// ASSUMPTIONS (the spec does not say; change them here):
//   - An attribute is the segments " key", `="`, the value with & and " escaped as &amp; and &quot;, and `"`.
//     Attributes come in the order role, type, name, tool_call_id (each only when set).
//   - System and assistant text (content, reasoning, tool-call arguments) is encoded with specials
//     enabled, as a template rendered to text and tokenized would be; user and tool text, tag names and
//     attribute values with specials disabled.
//   - A tool call renders inside the assistant message, after the response block, as
//     <|open|>tool_call name="NAME" id="ID"<|sep|>ARGUMENTS<|close|>tool_call<|sep|> (id only when set).
//   - The thinking-effort message is <|open|>message role="system" type="thinking-effort"<|sep|>EFFORT
//     <|close|>message<|sep|><|end_of_msg|>, placed after the leading system messages (first if none).
//   - The response block is always rendered, empty when the content is. In thinking mode every assistant
//     message has its think block (earlier turns keep their reasoning); with thinking off an assistant
//     message that carries reasoning is an error rather than silently dropped.
//   - No BOS.

// Token is one token of an encoded conversation or text, with what it belongs to.
type Token struct {
	ID int32
	// Message is the index in Conversation.Messages of the message the token is part of (its markup
	// included), or -1: the thinking-effort message, the generation prompt, raw text.
	Message int
	Channel Channel
}

// IDs returns the ids of tokens.
func IDs(tokens []Token) []int32 {
	ids := make([]int32, len(tokens))
	for i, t := range tokens {
		ids[i] = t.ID
	}
	return ids
}

// ErrThinkingUnset is returned for a conversation whose Thinking is ThinkingUnset.
var ErrThinkingUnset = errors.New("tokenizer: conversation: thinking mode is unset (choose ThinkingOn or ThinkingOff)")

// efforts are the values of Conversation.Effort the format knows (low, medium, high, max).
var efforts = []string{"low", "medium", "high", "max"}

// EncodeText encodes raw text that is not a conversation: every token is ChannelText with Message -1.
// With allowSpecial the names of special tokens in text become their ids (EncodeSpecial), else they are
// ordinary text (Encode).
func (t *Tokenizer) EncodeText(text string, allowSpecial bool) []Token {
	var ids []int32
	if allowSpecial {
		ids = t.EncodeSpecial(text)
	} else {
		ids = t.Encode(text)
	}
	return textTokens(ids)
}

// EncodeTextLimit is EncodeText refused past limit tokens: false when text has more. The encoder stops
// at the limit, special tokens or not (as EncodeLimit: a huge text is not tokenized whole).
func (t *Tokenizer) EncodeTextLimit(text string, allowSpecial bool, limit int) ([]Token, bool) {
	ids, ok := t.appendLimit(nil, text, allowSpecial, limit)
	if !ok {
		return nil, false
	}
	return textTokens(ids), true
}

// textTokens are ids as tokens of raw text: ChannelText, no message.
func textTokens(ids []int32) []Token {
	out := make([]Token, len(ids))
	for i, id := range ids {
		out[i] = Token{id, -1, ChannelText}
	}
	return out
}

// EncodeConversation renders c in the K3 chat format and encodes it, recording for every token its
// message and channel. c.Thinking must be set. It is EncodeConversationLimit with no limit.
func (t *Tokenizer) EncodeConversation(c Conversation) ([]Token, error) {
	tokens, _, err := t.EncodeConversationLimit(c, math.MaxInt)
	return tokens, err
}

// EncodeConversationLimit is EncodeConversation refused past limit tokens. Within the limit it returns
// EncodeConversation's tokens and true. Past it, it returns false and the tokens rendered so far: the
// renderer stops as soon as it holds more than limit tokens (at most one piece's ids, or one special
// token, past the limit), so that a conversation of a million messages, or one huge message, is neither
// rendered nor tokenized whole to be refused. The last token says in which message it stopped. c is
// validated whole first: an invalid conversation is an error whatever its length.
func (t *Tokenizer) EncodeConversationLimit(c Conversation, limit int) ([]Token, bool, error) {
	if err := validate(c); err != nil {
		return nil, false, err
	}
	r := renderer{t: t, limit: limit}
	for _, s := range []struct {
		name string
		dst  *int32
	}{{"<|open|>", &r.open}, {"<|close|>", &r.close}, {"<|sep|>", &r.sep}, {"<|end_of_msg|>", &r.eom}} {
		id, ok := t.SpecialID(s.name)
		if !ok {
			return nil, false, fmt.Errorf("tokenizer: conversation: the vocabulary has no %s token", s.name)
		}
		*s.dst = id
	}
	effortAt := 0
	for effortAt < len(c.Messages) && c.Messages[effortAt].Role == RoleSystem {
		effortAt++
	}
	for i, m := range c.Messages {
		if i == effortAt && c.Effort != "" {
			r.effort(c.Effort)
		}
		if r.message(i, m, c.Thinking); r.over {
			return r.out, false, nil
		}
	}
	if effortAt == len(c.Messages) && c.Effort != "" {
		r.effort(c.Effort)
	}
	if c.GenerationPrompt {
		r.openTag("message", -1, attr{"role", string(RoleAssistant)})
		if c.Thinking == ThinkingOn {
			r.openTag("think", -1)
		} else {
			r.openTag("response", -1)
		}
	}
	return r.out, !r.over, nil
}

// validate checks c before rendering, naming the message at fault.
func validate(c Conversation) error {
	switch c.Thinking {
	case ThinkingOn, ThinkingOff:
	case ThinkingUnset:
		return ErrThinkingUnset
	default:
		return fmt.Errorf("tokenizer: conversation: unknown thinking mode %d", c.Thinking)
	}
	if c.Effort != "" {
		if !slices.Contains(efforts, c.Effort) {
			return fmt.Errorf("tokenizer: conversation: thinking effort %q, want one of %s", c.Effort, strings.Join(efforts, ", "))
		}
		if c.Thinking != ThinkingOn {
			return fmt.Errorf("tokenizer: conversation: thinking effort %q with thinking off", c.Effort)
		}
	}
	for i, m := range c.Messages {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("tokenizer: conversation: message %d (%s): %s", i, m.Role, fmt.Sprintf(format, args...))
		}
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		default:
			return bad("unknown role")
		}
		if m.Role != RoleAssistant && (m.Reasoning != "" || len(m.ToolCalls) > 0) {
			return bad("only assistant messages carry reasoning or tool calls")
		}
		if m.Role == RoleAssistant && m.Reasoning != "" && c.Thinking == ThinkingOff {
			return bad("reasoning given but thinking is off")
		}
		if m.Role != RoleTool && m.ToolCallID != "" {
			return bad("only tool messages carry tool_call_id")
		}
		for j, call := range m.ToolCalls {
			if call.Name == "" {
				return bad("tool call %d has no name", j)
			}
		}
	}
	return nil
}

// renderer appends the tokens of the markup and the text segments, up to limit tokens: once it holds
// more it is over, and appends nothing further.
type renderer struct {
	t                     *Tokenizer
	out                   []Token
	ids                   []int32 // scratch
	open, close, sep, eom int32
	limit                 int
	over                  bool // len(out) > limit
}

type attr struct{ key, value string }

func (r *renderer) special(id int32, msg int) {
	if r.over {
		return
	}
	r.out = append(r.out, Token{id, msg, ChannelStructure})
	r.over = len(r.out) > r.limit
}

// text encodes one segment on its own, stopping within it once the limit is passed.
func (r *renderer) text(s string, msg int, ch Channel, allowSpecial bool) {
	if r.over {
		return
	}
	var ok bool
	r.ids, ok = r.t.appendLimit(r.ids[:0], s, allowSpecial, r.limit-len(r.out))
	for _, id := range r.ids {
		r.out = append(r.out, Token{id, msg, ch})
	}
	r.over = !ok
}

func (r *renderer) openTag(name string, msg int, attrs ...attr) {
	if r.over { // nor escape the values
		return
	}
	r.special(r.open, msg)
	r.text(name, msg, ChannelStructure, false)
	for _, a := range attrs {
		r.text(" "+a.key, msg, ChannelStructure, false)
		r.text(`="`, msg, ChannelStructure, false)
		r.text(escapeValue(a.value), msg, ChannelStructure, false)
		r.text(`"`, msg, ChannelStructure, false)
	}
	r.special(r.sep, msg)
}

func (r *renderer) closeTag(name string, msg int) {
	r.special(r.close, msg)
	r.text(name, msg, ChannelStructure, false)
	r.special(r.sep, msg)
}

// block renders <|open|>name attrs<|sep|>body<|close|>name<|sep|>.
func (r *renderer) block(name string, msg int, body string, ch Channel, allowSpecial bool, attrs ...attr) {
	r.openTag(name, msg, attrs...)
	r.text(body, msg, ch, allowSpecial)
	r.closeTag(name, msg)
}

func (r *renderer) message(i int, m Message, thinking Thinking) {
	attrs := []attr{{"role", string(m.Role)}}
	if m.Name != "" {
		attrs = append(attrs, attr{"name", m.Name})
	}
	if m.ToolCallID != "" {
		attrs = append(attrs, attr{"tool_call_id", m.ToolCallID})
	}
	r.openTag("message", i, attrs...)
	switch m.Role {
	case RoleSystem:
		r.text(m.Content, i, ChannelSystem, true)
	case RoleUser:
		r.text(m.Content, i, ChannelUser, false)
	case RoleTool:
		r.text(m.Content, i, ChannelTool, false)
	case RoleAssistant:
		if thinking == ThinkingOn {
			r.block("think", i, m.Reasoning, ChannelThink, true)
		}
		r.block("response", i, m.Content, ChannelResponse, true)
		for _, call := range m.ToolCalls {
			if r.over {
				break
			}
			callAttrs := []attr{{"name", call.Name}}
			if call.ID != "" {
				callAttrs = append(callAttrs, attr{"id", call.ID})
			}
			r.block("tool_call", i, call.Arguments, ChannelToolCall, true, callAttrs...)
		}
	}
	r.closeTag("message", i)
	r.special(r.eom, i)
}

func (r *renderer) effort(effort string) {
	r.openTag("message", -1, attr{"role", string(RoleSystem)}, attr{"type", "thinking-effort"})
	r.text(effort, -1, ChannelSystem, false)
	r.closeTag("message", -1)
	r.special(r.eom, -1)
}

var valueEscaper = strings.NewReplacer("&", "&amp;", `"`, "&quot;")

func escapeValue(s string) string { return valueEscaper.Replace(s) }
