package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Config is what tokenizer_config.json says: the names of the NumSpecials special ids that follow the
// BPE tokens, and which of them are the BOS, EOS, PAD and UNK tokens.
type Config struct {
	// Specials[i] names id numBPE+i. Slots the file leaves unnamed hold "<|reserved_token_ID|>", ID being
	// the decimal id, as Kimi's tokenization_kimi.py names them.
	Specials []string
	// BOS, EOS, PAD and UNK are token names ("" when the file has none).
	BOS, EOS, PAD, UNK string
}

// k3Offsets lists the named K3 special tokens by their offset from the first special id (spec section
// 6: 163584 + offset). The other offsets are reserved.
var k3Offsets = map[int]string{
	0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>", 5: "<|sep|>",
	6: "[start_header_id]", 7: "[end_header_id]", 9: "[EOT]",
	18: "<|media_begin|>", 19: "<|media_content|>", 20: "<|media_end|>", 21: "<|media_pad|>",
	254: "[UNK]", 255: "[PAD]",
}

// K3Config returns the K3 special tokens placed after numBPE BPE tokens: the names of spec section 6 at
// their offsets (+0 [BOS], +1 [EOS], +2 <|end_of_msg|>, +3 <|open|>, +4 <|close|>, +5 <|sep|>,
// +6 [start_header_id], +7 [end_header_id], +9 [EOT], +18..+21 <|media_begin|> <|media_content|>
// <|media_end|> <|media_pad|>, +254 [UNK], +255 [PAD]), reserved names in the other slots, and bos, eos,
// pad and unk tokens [BOS], [EOS], [PAD], [UNK] as in Kimi K2's tokenizer_config.json (the chat stop
// token is <|end_of_msg|>).
func K3Config(numBPE int) *Config {
	c := &Config{Specials: make([]string, NumSpecials), BOS: "[BOS]", EOS: "[EOS]", PAD: "[PAD]", UNK: "[UNK]"}
	for i := range c.Specials {
		if name, ok := k3Offsets[i]; ok {
			c.Specials[i] = name
		} else {
			c.Specials[i] = reservedName(numBPE + i)
		}
	}
	return c
}

func reservedName(id int) string { return "<|reserved_token_" + strconv.Itoa(id) + "|>" }

// ReadConfig parses tokenizer_config.json (data, read from the file name) for a vocabulary of numBPE BPE
// tokens. Every id in added_tokens_decoder must lie in [numBPE, numBPE+NumSpecials) and every name must
// be unique; bos_token, eos_token, pad_token and unk_token may be strings, {"content": ...} objects or
// null.
func ReadConfig(data []byte, name string, numBPE int) (*Config, error) {
	var raw struct {
		Added map[string]struct {
			Content string `json:"content"`
		} `json:"added_tokens_decoder"`
		BOS json.RawMessage `json:"bos_token"`
		EOS json.RawMessage `json:"eos_token"`
		PAD json.RawMessage `json:"pad_token"`
		UNK json.RawMessage `json:"unk_token"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrFormat, name, jsonErrorAt(data, err))
	}
	c := &Config{Specials: make([]string, NumSpecials)}
	ids := make([]string, 0, len(raw.Added))
	for k := range raw.Added {
		ids = append(ids, k)
	}
	sort.Strings(ids) // deterministic error messages
	used := map[string]int{}
	for _, k := range ids {
		id, err := strconv.Atoi(k)
		if err != nil || id < numBPE || id >= numBPE+NumSpecials {
			return nil, fmt.Errorf("%w: %s: added_tokens_decoder key %q is not an id in [%d, %d)", ErrFormat, name, k, numBPE, numBPE+NumSpecials)
		}
		content := raw.Added[k].Content
		if content == "" {
			return nil, fmt.Errorf("%w: %s: added token %d has no content", ErrFormat, name, id)
		}
		if prev, ok := used[content]; ok {
			return nil, fmt.Errorf("%w: %s: added tokens %d and %d are both %q", ErrFormat, name, prev, id, content)
		}
		used[content] = id
		c.Specials[id-numBPE] = content
	}
	for i, s := range c.Specials {
		if s == "" {
			c.Specials[i] = reservedName(numBPE + i)
			if prev, ok := used[c.Specials[i]]; ok {
				return nil, fmt.Errorf("%w: %s: added token %d is named %q, the reserved name of slot %d", ErrFormat, name, prev, c.Specials[i], numBPE+i)
			}
		}
	}
	for _, f := range []struct {
		key string
		raw json.RawMessage
		dst *string
	}{{"bos_token", raw.BOS, &c.BOS}, {"eos_token", raw.EOS, &c.EOS}, {"pad_token", raw.PAD, &c.PAD}, {"unk_token", raw.UNK, &c.UNK}} {
		s, err := tokenName(f.raw)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %s: %v", ErrFormat, name, f.key, err)
		}
		*f.dst = s
	}
	return c, nil
}

// tokenName reads a token field of tokenizer_config.json: a string, an AddedToken object or null.
func tokenName(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", fmt.Errorf("want a string or an object with content, got %.40s", raw)
	}
	return *obj.Content, nil
}

// jsonErrorAt turns a JSON decoding error into a message with a line and column.
func jsonErrorAt(data []byte, err error) string {
	var off int64 = -1
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
	}
	if off < 0 || off > int64(len(data)) {
		return err.Error()
	}
	before := data[:off]
	line := bytes.Count(before, []byte{'\n'}) + 1
	col := len(before) - bytes.LastIndexByte(before, '\n')
	return fmt.Sprintf("line %d, column %d: %v", line, col, err)
}

// JSON renders c as a tokenizer_config.json for numBPE BPE tokens, in the shape of Kimi's (every
// special slot listed in added_tokens_decoder in id order, reserved ones included), with stable output.
func (c *Config) JSON(numBPE int) ([]byte, error) {
	if len(c.Specials) != NumSpecials {
		return nil, fmt.Errorf("tokenizer: config has %d special slots, want %d", len(c.Specials), NumSpecials)
	}
	var b bytes.Buffer
	str := func(s string) string { q, _ := json.Marshal(s); return string(q) }
	b.WriteString("{\n  \"added_tokens_decoder\": {\n")
	for i, name := range c.Specials {
		fmt.Fprintf(&b, "    \"%d\": {\"content\": %s, \"lstrip\": false, \"normalized\": false, \"rstrip\": false, \"single_word\": false, \"special\": true}", numBPE+i, str(name))
		if i < len(c.Specials)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("  },\n")
	var extra []string
	for _, name := range c.Specials {
		if name != c.BOS && name != c.EOS && name != c.PAD && name != c.UNK && !strings.HasPrefix(name, "<|reserved_token_") {
			extra = append(extra, str(name))
		}
	}
	fmt.Fprintf(&b, "  \"additional_special_tokens\": [%s],\n", strings.Join(extra, ", "))
	for _, f := range []struct{ key, val string }{{"bos_token", c.BOS}, {"eos_token", c.EOS}, {"pad_token", c.PAD}, {"unk_token", c.UNK}} {
		if f.val == "" {
			fmt.Fprintf(&b, "  %q: null,\n", f.key)
		} else {
			fmt.Fprintf(&b, "  %q: %s,\n", f.key, str(f.val))
		}
	}
	b.WriteString("  \"clean_up_tokenization_spaces\": false,\n  \"model_max_length\": 1048576,\n  \"tokenizer_class\": \"TikTokenTokenizer\"\n}\n")
	return b.Bytes(), nil
}
