package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Tokenizer is a byte-level BPE vocabulary in tiktoken's format plus its special tokens. Ids
// 0..NumBPE()-1 are BPE tokens (id = rank); ids NumBPE()..VocabSize()-1 are the NumSpecials special
// tokens. A Tokenizer is immutable after New and safe for concurrent use.
type Tokenizer struct {
	tokens []string         // BPE id -> bytes
	ranks  map[string]int32 // bytes -> BPE id

	specials     []string         // special id - NumBPE -> name
	specialIDs   map[string]int32 // name -> special id
	specialLens  []int            // the distinct lengths of special names, for EncodeSpecial's scan
	specialFirst [256]bool        // the first bytes of special names

	bos, eos, pad, unk int32 // -1 when the config names none

	cache pieceCache
}

// NumBPE is the number of BPE tokens (K3: 163,584).
func (t *Tokenizer) NumBPE() int { return len(t.tokens) }

// VocabSize is the number of ids, BPE and special (K3: 163,840).
func (t *Tokenizer) VocabSize() int { return len(t.tokens) + len(t.specials) }

// SpecialID returns the id of the special token with the given name (for example "<|open|>").
func (t *Tokenizer) SpecialID(name string) (int32, bool) {
	id, ok := t.specialIDs[name]
	return id, ok
}

// IsSpecial reports whether id is one of the special ids.
func (t *Tokenizer) IsSpecial(id int32) bool {
	return int(id) >= len(t.tokens) && int(id) < t.VocabSize()
}

// BOS returns the id of the config's bos_token, or -1. EOS, PAD and UNK likewise.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS returns the id of the config's eos_token, or -1.
func (t *Tokenizer) EOS() int32 { return t.eos }

// PAD returns the id of the config's pad_token, or -1.
func (t *Tokenizer) PAD() int32 { return t.pad }

// UNK returns the id of the config's unk_token, or -1.
func (t *Tokenizer) UNK() int32 { return t.unk }

// Token returns the bytes of a BPE token or the name of a special token, and false for an id out of range.
func (t *Tokenizer) Token(id int32) (string, bool) {
	switch {
	case id >= 0 && int(id) < len(t.tokens):
		return t.tokens[id], true
	case t.IsSpecial(id):
		return t.specials[int(id)-len(t.tokens)], true
	}
	return "", false
}

// Tokens returns the BPE tokens indexed by rank. The slice is shared: do not modify it.
func (t *Tokenizer) Tokens() []string { return t.tokens }

// Decode returns the text of ids: the concatenated bytes of BPE tokens, with special tokens rendered as
// their names. The result may be invalid UTF-8 where a multi-byte character is cut. An id out of range
// is an error.
func (t *Tokenizer) Decode(ids []int32) (string, error) {
	var b strings.Builder
	for i, id := range ids {
		s, ok := t.Token(id)
		if !ok {
			return "", fmt.Errorf("tokenizer: decode: position %d: id %d out of range [0, %d)", i, id, t.VocabSize())
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

// Piece renders one token for display: a special token by its name; a BPE token as its text, where
// control characters are escaped Go-style (\n, \t, \x00, \u0085 ...), a backslash is doubled, and every byte that
// is not part of valid UTF-8 (for example one third of a Han character) shows as <0xE4>. An id out of
// range shows as <bad id N>.
func (t *Tokenizer) Piece(id int32) string {
	if t.IsSpecial(id) {
		return t.specials[int(id)-len(t.tokens)]
	}
	if id < 0 || int(id) >= len(t.tokens) {
		return fmt.Sprintf("<bad id %d>", id)
	}
	return DisplayBytes(t.tokens[id])
}

// DisplayBytes renders bytes as Piece does for a BPE token.
func DisplayBytes(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, "<0x%02X>", s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r < 0xa0: // C1 controls
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
