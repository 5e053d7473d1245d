package tokenizer

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// compactMagic starts the compact vocabulary format.
const compactMagic = "K3BPE\x01"

// MarshalCompact encodes a vocabulary in rank order whose first 256 tokens are the single bytes in byte
// order and whose every later token is the concatenation of two earlier ones (as Train and Pad produce
// them): the magic "K3BPE\x01", the number of later tokens, then for each a pair of earlier ids, all as
// uvarints. About 3.5 bytes a token, against about 17 in tiktoken.model; it is the embedded format.
func MarshalCompact(tokens []string) ([]byte, error) {
	if len(tokens) < 256 {
		return nil, fmt.Errorf("tokenizer: compact: %d tokens, want at least the 256 single bytes", len(tokens))
	}
	ids := make(map[string]int, len(tokens))
	for i, tok := range tokens {
		if i < 256 && tok != string([]byte{byte(i)}) {
			return nil, fmt.Errorf("tokenizer: compact: token %d is %q, want the single byte 0x%02x", i, tok, i)
		}
		if _, dup := ids[tok]; dup {
			return nil, fmt.Errorf("tokenizer: compact: token %d %q appears twice", i, tok)
		}
		ids[tok] = i
	}
	out := binary.AppendUvarint([]byte(compactMagic), uint64(len(tokens)-256))
	for i := 256; i < len(tokens); i++ {
		a, b, ok := splitEarlier(tokens[i], i, ids)
		if !ok {
			return nil, fmt.Errorf("tokenizer: compact: token %d %q is not the concatenation of two earlier tokens", i, tokens[i])
		}
		out = binary.AppendUvarint(out, uint64(a))
		out = binary.AppendUvarint(out, uint64(b))
	}
	return out, nil
}

// splitEarlier finds the first cut of tok into two tokens both ranked below limit.
func splitEarlier(tok string, limit int, ids map[string]int) (int, int, bool) {
	for k := 1; k < len(tok); k++ {
		a, okA := ids[tok[:k]]
		b, okB := ids[tok[k:]]
		if okA && okB && a < limit && b < limit {
			return a, b, true
		}
	}
	return 0, 0, false
}

// UnmarshalCompact decodes the format of MarshalCompact.
func UnmarshalCompact(data []byte) ([]string, error) {
	if !bytes.HasPrefix(data, []byte(compactMagic)) {
		return nil, fmt.Errorf("%w: compact vocabulary: bad magic", ErrFormat)
	}
	r := bytes.NewReader(data[len(compactMagic):])
	n, err := binary.ReadUvarint(r)
	if err != nil || n > 1<<24 {
		return nil, fmt.Errorf("%w: compact vocabulary: bad count", ErrFormat)
	}
	tokens := make([]string, 256, 256+n)
	for b := range 256 {
		tokens[b] = string([]byte{byte(b)})
	}
	for i := range int(n) {
		a, errA := binary.ReadUvarint(r)
		b, errB := binary.ReadUvarint(r)
		id := uint64(256 + i)
		if errA != nil || errB != nil || a >= id || b >= id {
			return nil, fmt.Errorf("%w: compact vocabulary: token %d: bad pair", ErrFormat, id)
		}
		tokens = append(tokens, tokens[a]+tokens[b])
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%w: compact vocabulary: %d trailing bytes", ErrFormat, r.Len())
	}
	return tokens, nil
}

// Pad returns tokens extended to exactly n distinct tokens (or its first n when it has more). The added
// tokens are concatenations of two existing ones, so a padded vocabulary still has the compact form.
//
// How: the base list is every token of rank 256 or more that is valid UTF-8 without control characters
// other than tab, CR and LF, in rank order, followed by the printable ASCII bytes, tab, LF and CR. Pairs
// (i, j) of base indices are visited by diagonals (i+j = 0, 1, 2, ...; i ascending on each diagonal) and
// base[i]+base[j] is added unless it already is a token. The padding tokens are thus valid UTF-8 and
// made of the earliest (most frequent) learned tokens. When n <= len(tokens) the result shares tokens'
// array.
func Pad(tokens []string, n int) ([]string, error) {
	if n <= len(tokens) {
		return tokens[:n:n], nil
	}
	out := make([]string, len(tokens), n)
	copy(out, tokens)
	have := make(map[string]bool, n)
	for _, t := range tokens {
		have[t] = true
	}
	var base []string
	for i, t := range tokens {
		if i >= 256 && padBase(t) {
			base = append(base, t)
		}
	}
	for b := range 128 {
		if s := string(rune(b)); padBase(s) && have[s] {
			base = append(base, s)
		}
	}
	for d := 0; len(out) < n; d++ {
		if d > 2*(len(base)-1) {
			return nil, fmt.Errorf("tokenizer: pad: %d base tokens cannot make %d tokens", len(base), n)
		}
		for i := max(0, d-len(base)+1); i <= d && i < len(base) && len(out) < n; i++ {
			if s := base[i] + base[d-i]; !have[s] {
				have[s] = true
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// padBase reports whether a token may be a part of padding tokens.
func padBase(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if (r < 0x20 && r != '\t' && r != '\n' && r != '\r') || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}
