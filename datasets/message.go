package datasets

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// This file turns one JSON value in the common chat shape into a tokenizer.Conversation. It decodes field
// by field (not into a struct) so that every error names the field it is about, and so that the shapes
// seen in the wild (content as a list of parts, reasoning under three names, arguments as a string or an
// object) all land in one spelling.

// obj is a JSON object whose values are decoded one field at a time.
type obj map[string]json.RawMessage

// parseConversation reads {"messages": [...], "id", "thinking", "thinking_effort", "add_generation_prompt"}
// or a bare array of messages. "metadata" is ignored (a place for anything of the caller's); any other
// key, at the top or inside a message, tool call or content part, is an error naming it: a misspelled
// "contnet" would otherwise become an empty turn, a "thinkng" an unset mode.
//
// Text that is not valid UTF-8 is refused (JSON text must be UTF-8): decoding it would quietly turn each
// bad byte into U+FFFD, and the model would score text the file does not hold.
func parseConversation(data []byte) (tokenizer.Conversation, error) {
	var c tokenizer.Conversation
	data = bytes.TrimSpace(data)
	if !utf8.Valid(data) {
		return c, fmt.Errorf("not valid UTF-8 (byte %d of the conversation's JSON text): JSON must be UTF-8; fix the encoding", firstInvalid(data)+1)
	}
	if bytes.HasPrefix(data, utf8BOM) {
		return c, errors.New("starts with a UTF-8 byte-order mark (U+FEFF), which is not JSON: a mark is skipped only at the start of a file (were two files joined?)")
	}
	if len(data) > 0 && data[0] == '[' {
		msgs, err := parseMessages(data, "messages")
		c.Messages = msgs
		return c, err
	}
	var o obj
	if err := json.Unmarshal(data, &o); err != nil || o == nil { // null decodes to a nil map
		return c, fmt.Errorf("want a JSON object with \"messages\" or an array of messages%s", jsonProblem(err, data))
	}
	if err := knownKeys(o, "", conversationKeys); err != nil {
		return c, err
	}
	raw, ok := o["messages"]
	if !ok {
		return c, errorf("messages", "missing")
	}
	var err error
	if c.Messages, err = parseMessages(raw, "messages"); err != nil {
		return c, err
	}
	if c.ID, err = idField(o, "id"); err != nil {
		return c, err
	}
	thinking, set, err := boolField(o, "thinking")
	if err != nil {
		return c, err
	}
	switch {
	case !set:
		c.Thinking = tokenizer.ThinkingUnset // the engine makes the caller choose: see SetThinking
	case thinking:
		c.Thinking = tokenizer.ThinkingOn
	default:
		c.Thinking = tokenizer.ThinkingOff
	}
	if c.Effort, err = stringField(o, "thinking_effort", "thinking_effort"); err != nil {
		return c, err
	}
	switch c.Effort {
	case "", "low", "medium", "high", "max":
	default:
		return c, errorf("thinking_effort", "%q is not one of low, medium, high, max", c.Effort)
	}
	if c.GenerationPrompt, _, err = boolField(o, "add_generation_prompt"); err != nil {
		return c, err
	}
	return c, nil
}

// parseMessages reads a non-empty array of messages; path is the field name used in errors.
func parseMessages(data []byte, path string) ([]tokenizer.Message, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		return nil, errorf(path, "want an array of messages%s", jsonProblem(err, data))
	}
	if len(raws) == 0 {
		return nil, errorf(path, "no messages")
	}
	msgs := make([]tokenizer.Message, len(raws))
	for i, raw := range raws {
		var err error
		if msgs[i], err = parseMessage(raw, fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return nil, err
		}
	}
	return msgs, nil
}

// parseMessage reads one message. Reasoning is accepted as reasoning_content, reasoning or thinking.
func parseMessage(data []byte, path string) (tokenizer.Message, error) {
	var m tokenizer.Message
	var o obj
	if err := json.Unmarshal(data, &o); err != nil || o == nil {
		return m, errorf(path, "want a message object")
	}
	if err := knownKeys(o, path, messageKeys); err != nil {
		return m, err
	}
	role, err := stringField(o, "role", path+".role")
	if err != nil {
		return m, err
	}
	switch m.Role = tokenizer.Role(role); m.Role {
	case tokenizer.RoleSystem, tokenizer.RoleUser, tokenizer.RoleAssistant, tokenizer.RoleTool:
	case "":
		return m, errorf(path+".role", "missing")
	default:
		return m, errorf(path+".role", "unknown role %q (want system, user, assistant or tool)", role)
	}
	if m.Content, err = contentField(o["content"], path+".content"); err != nil {
		return m, err
	}
	for _, key := range []string{"reasoning_content", "reasoning", "thinking"} {
		r, err := stringField(o, key, path+"."+key)
		if err != nil {
			return m, err
		}
		if r != "" && m.Reasoning != "" && r != m.Reasoning {
			return m, errorf(path+"."+key, "differs from the reasoning given under another name")
		}
		if r != "" {
			m.Reasoning = r
		}
	}
	if m.Name, err = stringField(o, "name", path+".name"); err != nil {
		return m, err
	}
	if m.ToolCallID, err = stringField(o, "tool_call_id", path+".tool_call_id"); err != nil {
		return m, err
	}
	if m.ToolCalls, err = toolCalls(o["tool_calls"], path+".tool_calls"); err != nil {
		return m, err
	}
	// Fields that only one role can carry: elsewhere they mean the data was mislabelled.
	if m.Role != tokenizer.RoleAssistant && m.Reasoning != "" {
		return m, errorf(path+".reasoning_content", "only assistant messages have reasoning (role is %s)", m.Role)
	}
	if m.Role != tokenizer.RoleAssistant && len(m.ToolCalls) > 0 {
		return m, errorf(path+".tool_calls", "only assistant messages make tool calls (role is %s)", m.Role)
	}
	return m, nil
}

// contentField reads content: a string, null (an assistant turn that only calls tools), or a list of
// {"type": "text", "text": ...} parts, concatenated. Other part types (images, audio) are an error.
func contentField(raw json.RawMessage, path string) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []obj
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errorf(path, "want a string or a list of text parts")
	}
	var b strings.Builder
	for i, p := range parts {
		pp := fmt.Sprintf("%s[%d]", path, i)
		typ, err := stringField(p, "type", pp+".type")
		if err != nil {
			return "", err
		}
		if typ != "text" {
			return "", errorf(pp+".type", "part of type %q is not supported (only text)", typ)
		}
		if err := knownKeys(p, pp, partKeys); err != nil {
			return "", err
		}
		text, err := stringField(p, "text", pp+".text")
		if err != nil {
			return "", err
		}
		b.WriteString(text)
	}
	return b.String(), nil
}

// toolCalls reads [{id, type: "function", function: {name, arguments}}]. The flat shape {id, name,
// arguments} that tokenizer.ToolCall marshals to is accepted too, so this package reads its own output.
func toolCalls(raw json.RawMessage, path string) ([]tokenizer.ToolCall, error) {
	if isNull(raw) {
		return nil, nil
	}
	var objs []obj
	if err := json.Unmarshal(raw, &objs); err != nil {
		return nil, errorf(path, "want an array of tool calls")
	}
	if len(objs) == 0 {
		return nil, nil // [] and null mean the same: no calls
	}
	calls := make([]tokenizer.ToolCall, len(objs))
	for i, o := range objs {
		p := fmt.Sprintf("%s[%d]", path, i)
		if o == nil {
			return nil, errorf(p, "want a tool call object")
		}
		if err := knownKeys(o, p, toolCallKeys); err != nil {
			return nil, err
		}
		var err error
		if calls[i].ID, err = stringField(o, "id", p+".id"); err != nil {
			return nil, err
		}
		typ, err := stringField(o, "type", p+".type")
		if err != nil {
			return nil, err
		}
		if typ != "" && typ != "function" {
			return nil, errorf(p+".type", "tool call of type %q is not supported (only function)", typ)
		}
		fn := o
		if rawFn, ok := o["function"]; ok {
			fp := p + ".function"
			fn = nil // not into o's map: Unmarshal would merge the two
			if err := json.Unmarshal(rawFn, &fn); err != nil || fn == nil {
				return nil, errorf(fp, "want an object with name and arguments")
			}
			if err := knownKeys(fn, fp, functionKeys); err != nil {
				return nil, err
			}
			p = fp
		}
		if calls[i].Name, err = stringField(fn, "name", p+".name"); err != nil {
			return nil, err
		}
		if calls[i].Name == "" {
			return nil, errorf(p+".name", "missing")
		}
		if calls[i].Arguments, err = arguments(fn["arguments"], p+".arguments"); err != nil {
			return nil, err
		}
	}
	return calls, nil
}

// arguments returns a call's arguments as JSON text. A string is taken verbatim: it is the text the model
// wrote, and replay must render what the model saw. An object is written as compact JSON, each byte of
// invalid UTF-8 in it replaced by U+FFFD as encoding/json does in a string (so that the conversation reads
// back the same from its own JSON). Absent or null arguments are "{}".
func arguments(raw json.RawMessage, path string) (string, error) {
	if isNull(raw) {
		return "{}", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	raw = bytes.TrimSpace(raw)
	if raw[0] != '{' {
		return "", errorf(path, "want a JSON string or object")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return "", errorf(path, "%v", err)
	}
	return validUTF8(b.Bytes()), nil
}

// validUTF8 is s with every byte that is not part of valid UTF-8 replaced by U+FFFD, one for one, as
// encoding/json decodes a string (strings.ToValidUTF8 would merge a run of them into one).
func validUTF8(s []byte) string {
	if utf8.Valid(s) {
		return string(s)
	}
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.Write(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// firstInvalid is the offset of data's first byte that is not part of valid UTF-8 (len(data) if none).
func firstInvalid(data []byte) int {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(data)
}

// stringField reads o[key] as a string; absent or null is "".
func stringField(o obj, key, path string) (string, error) {
	raw, ok := o[key]
	if !ok || isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", errorf(path, "want a string, got %s", kind(raw))
	}
	return s, nil
}

// idField reads an id that may be a string or a number (kept as written).
func idField(o obj, key string) (string, error) {
	raw, ok := o[key]
	if !ok || isNull(raw) {
		return "", nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		return n.String(), nil
	}
	return stringField(o, key, key)
}

// boolField reads o[key] as a bool; set is false when it is absent or null.
func boolField(o obj, key string) (v, set bool, err error) {
	raw, ok := o[key]
	if !ok || isNull(raw) {
		return false, false, nil
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return false, false, errorf(key, "want true or false, got %s", kind(raw))
	}
	return v, true, nil
}

// utf8BOM is the UTF-8 byte-order mark, which editors on Windows put at the start of a text file.
var utf8BOM = []byte("\xef\xbb\xbf")

// jsonProblem ends a "want ..." message with what data holds instead: ", got a number" where
// encoding/json's error would name a Go type ("cannot unmarshal number into Go value of type
// datasets.obj") or err is nil (null), else ": " and the syntax error.
func jsonProblem(err error, data []byte) string {
	var te *json.UnmarshalTypeError
	if err == nil || errors.As(err, &te) {
		return ", got " + kind(data)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) { // where in the line (or item): encoding/json counts the bytes read
		return fmt.Sprintf(": %v (byte %d of the conversation's JSON text)", err, se.Offset)
	}
	return ": " + err.Error()
}

// isNull reports whether raw is absent or the JSON null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// kind names the JSON type of raw for error messages.
func kind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// The keys each object of the chat shape may hold (knownKeys).
var (
	conversationKeys = []string{"messages", "id", "thinking", "thinking_effort", "add_generation_prompt", "metadata"}
	messageKeys      = []string{"role", "content", "reasoning_content", "reasoning", "thinking", "name", "tool_call_id", "tool_calls"}
	partKeys         = []string{"type", "text"}
	toolCallKeys     = []string{"id", "type", "function", "name", "arguments"}
	functionKeys     = []string{"name", "arguments"}
)

// knownKeys refuses the first key of o (in sorted order) that is not in known, naming it and path.
func knownKeys(o obj, path string, known []string) error {
	var unknown []string
	for k := range o {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return errorf(path, "unknown key %q (want %s)", unknown[0], strings.Join(known, ", "))
}
