package tokenizer

import (
	"iter"
	"unicode/utf8"
)

// Pattern is the pre-tokenizer pattern of Kimi's tiktoken-based tokenizer, for reference and for the
// Python golden script. Go's regexp cannot express it (class intersection, lookahead), so the splitter
// below implements it by hand; the comments of pieceEnd map each branch to its alternative.
const Pattern = `[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// The long-input rule of Kimi's tokenizer (tokenization_kimi.py), applied before the pattern: the text is
// cut into pieces of at most MaxEncodeChars characters, and each of those wherever a run of consecutive
// whitespace or non-whitespace characters would exceed MaxRunChars. No pattern match crosses a cut.
const (
	MaxEncodeChars = 400_000
	MaxRunChars    = 25_000
)

// Pieces returns the pieces that BPE encodes one by one: the long-input rule, then the pattern's matches
// in order. The pieces are substrings of text and together they are exactly text.
//
// Bytes that are not valid UTF-8 are kept in the pieces, byte for byte, and each is classified as one
// character U+FFFD (a symbol, so it joins punctuation runs). tiktoken itself never sees such bytes (it
// encodes Python str); this choice keeps decode(encode(b)) == b for any bytes.
func Pieces(text string) iter.Seq[string] {
	return func(yield func(string) bool) {
		forEachChunk(text, func(chunk string) bool { return splitChunk(chunk, yield) })
	}
}

// Split returns the pieces of Pieces as a slice.
func Split(text string) []string {
	var out []string
	for p := range Pieces(text) {
		out = append(out, p)
	}
	return out
}

// forEachChunk applies the long-input rule: 400,000-character pieces (as Python slices a str), each cut
// as Kimi's _split_whitespaces_or_nonwhitespaces does, with Python's str.isspace as the whitespace test.
// A character is a code point; an invalid UTF-8 byte counts as one. Text of at most MaxRunChars bytes
// cannot reach either limit and passes through untouched.
func forEachChunk(text string, yield func(string) bool) bool {
	if len(text) <= MaxRunChars {
		return len(text) == 0 || yield(text)
	}
	start, chars := 0, 0
	for i := 0; i < len(text) && len(text)-start > MaxEncodeChars; { // fewer bytes than the limit: no cut
		if chars == MaxEncodeChars {
			if !splitRuns(text[start:i], yield) {
				return false
			}
			start, chars = i, 0
			continue
		}
		i += charSize(text, i)
		chars++
	}
	return splitRuns(text[start:], yield)
}

// splitRuns cuts s so that no slice holds more than MaxRunChars consecutive whitespace or non-whitespace
// characters; a cut falls before the character that would exceed the limit.
func splitRuns(s string, yield func(string) bool) bool {
	start, run := 0, 0
	inSpace := len(s) > 0 && pythonSpaceAt(s, 0)
	for i := 0; i < len(s); {
		at := i
		var sp bool
		if b := s[i]; b < utf8.RuneSelf { // the hot path, kept inline
			sp = pythonSpaceASCII[b]
			i++
		} else {
			r, n := utf8.DecodeRuneInString(s[i:])
			sp = isPythonSpace(r)
			i += n
		}
		if sp != inSpace {
			run, inSpace = 1, sp
		} else if run++; run > MaxRunChars {
			if !yield(s[start:at]) {
				return false
			}
			start, run = at, 1
		}
	}
	return yield(s[start:])
}

// charSize is the size of the character at s[i]: 1 for ASCII and for a byte that is not valid UTF-8.
func charSize(s string, i int) int {
	if s[i] < utf8.RuneSelf {
		return 1
	}
	_, n := utf8.DecodeRuneInString(s[i:])
	return n
}

// pythonSpaceASCII is Python's str.isspace for the ASCII characters.
var pythonSpaceASCII = func() (t [utf8.RuneSelf]bool) {
	for b := range rune(utf8.RuneSelf) {
		t[b] = isPythonSpace(b)
	}
	return t
}()

// pythonSpaceAt reports Python's str.isspace for the character at s[i].
func pythonSpaceAt(s string, i int) bool {
	if b := s[i]; b < utf8.RuneSelf {
		return pythonSpaceASCII[b]
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return isPythonSpace(r)
}

// splitChunk yields the pattern's matches over s. They cover s without gaps: every character is matched
// by some alternative (see pieceEnd).
func splitChunk(s string, yield func(string) bool) bool {
	for i := 0; i < len(s); {
		j := pieceEnd(s, i)
		if !yield(s[i:j]) {
			return false
		}
		i = j
	}
	return true
}

// pieceEnd returns the end of the match that starts at s[i], trying the alternatives in order with the
// backtracking semantics of fancy-regex (leftmost-first: the first alternative that matches wins, and
// inside it greedy quantifiers give back only as much as the rest needs).
func pieceEnd(s string, i int) int {
	c, n := classAt(s, i)
	// (1) [\p{Han}]+
	if c&cHan != 0 {
		return runEnd(s, i, cHan)
	}
	// (2) P? U* L+ C? where P = [^\r\n\p{L}\p{N}], U = upper-or-both, L = lower-or-both, C = contraction.
	// The greedy P? is tried with the prefix first, then without.
	if c&cPre != 0 {
		if j := upperLower(s, i+n); j >= 0 {
			return contraction(s, j)
		}
	}
	if j := upperLower(s, i); j >= 0 {
		return contraction(s, j)
	}
	// (3) P? U+ L* C?. Reached only when (2) failed, so L* matches nothing after the U run, but it is
	// written out to mirror the pattern.
	if c&cPre != 0 && i+n < len(s) {
		if c2, _ := classAt(s, i+n); c2&cUpper != 0 {
			return contraction(s, runEnd(s, runEnd(s, i+n, cUpper), cLower))
		}
	}
	if c&cUpper != 0 {
		return contraction(s, runEnd(s, runEnd(s, i, cUpper), cLower))
	}
	// (4) \p{N}{1,3}
	if c&cN != 0 {
		j := i + n
		for k := 1; k < 3 && j < len(s); k++ {
			c2, n2 := classAt(s, j)
			if c2&cN == 0 {
				break
			}
			j += n2
		}
		return j
	}
	// (5) ' '?[^\s\p{L}\p{N}]+[\r\n]*
	start := -1
	if s[i] == ' ' && i+1 < len(s) {
		if c2, _ := classAt(s, i+1); c2&cPunct != 0 {
			start = i + 1
		}
	}
	if start < 0 && c&cPunct != 0 {
		start = i
	}
	if start >= 0 {
		j := runEnd(s, start, cPunct)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	if c&cSpace != 0 {
		return spaceEnd(s, i)
	}
	return i + n // unreachable: every class is covered above; kept so that a bad table cannot loop
}

// spaceEnd implements alternatives (6) \s*[\r\n]+, (7) \s+(?!\S) and (8) \s+ at a whitespace character.
// Over the maximal whitespace run from i: (6) ends just after the run's last CR or LF, if it has one;
// (7) takes the whole run at the end of the text, else the run minus its last character if that leaves
// at least one; (8) takes the single remaining case, a lone whitespace character before a non-space.
func spaceEnd(s string, i int) int {
	lastNL, lastStart, count := -1, i, 0
	e := i
	for e < len(s) {
		c, n := classAt(s, e)
		if c&cSpace == 0 {
			break
		}
		if c&cCRLF != 0 {
			lastNL = e
		}
		lastStart = e
		e += n
		count++
	}
	switch {
	case lastNL >= 0:
		return lastNL + 1
	case e == len(s):
		return e
	case count >= 2:
		return lastStart
	}
	return e
}

// upperLower matches U* L+ from s0 and returns its end, or -1. U* first runs as far as it can, then gives
// back characters until one in L follows: so the L+ part starts at the last position k in the U run (or
// just after it) whose character is in L, and runs over L from there.
func upperLower(s string, s0 int) int {
	lastL := -1
	for q := s0; q < len(s); {
		c, n := classAt(s, q)
		if c&cLower != 0 {
			lastL = q
		}
		if c&cUpper == 0 {
			break
		}
		q += n
	}
	if lastL < 0 {
		return -1
	}
	return runEnd(s, lastL, cLower)
}

// contraction matches the optional (?i:'s|'t|'re|'ve|'m|'ll|'d) at j and returns the end. Case folding
// is Unicode simple folding as in the regex crate, under which U+017F LATIN SMALL LETTER LONG S is an s;
// no other non-ASCII character folds to one of these letters.
func contraction(s string, j int) int {
	if j+1 >= len(s) || s[j] != '\'' {
		return j
	}
	switch s[j+1] {
	case 's', 'S', 't', 'T', 'm', 'M', 'd', 'D':
		return j + 2
	case 'r', 'R', 'v', 'V':
		if j+2 < len(s) && s[j+2]|0x20 == 'e' {
			return j + 3
		}
	case 'l', 'L':
		if j+2 < len(s) && s[j+2]|0x20 == 'l' {
			return j + 3
		}
	case 0xC5: // U+017F is C5 BF
		if j+2 < len(s) && s[j+2] == 0xBF {
			return j + 3
		}
	}
	return j
}

// runEnd returns the end of the run of characters from i that have any bit of mask.
func runEnd(s string, i int, mask class) int {
	for i < len(s) {
		c, n := classAt(s, i)
		if c&mask == 0 {
			break
		}
		i += n
	}
	return i
}
