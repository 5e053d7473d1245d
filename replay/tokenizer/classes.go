package tokenizer

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// class is a set of bits describing one character for the pre-tokenizer. Each bit is one of the character
// classes that the K3 pattern names, so that every test in split.go is a single AND.
type class uint16

const (
	cHan   class = 1 << iota // \p{Han} (the Script property, not Script_Extensions: regex-syntax resolves a bare \p{Han} to Script)
	cL                       // \p{L}
	cN                       // \p{N}
	cSpace                   // \s: the White_Space property
	cCRLF                    // \r or \n
	cUpper                   // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]
	cLower                   // [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]
	cPre                     // [^\r\n\p{L}\p{N}]: the optional prefix of the letter alternatives
	cPunct                   // [^\s\p{L}\p{N}]: the body of the punctuation alternative
)

// classOf computes the class bits of r from Go's Unicode tables (unicode.Version, 15.0.0 in Go 1.26).
// Characters assigned after that version are unassigned here, so they classify like punctuation; the one
// exception patched in by hand is CJK Extension I (Unicode 15.1, U+2EBF0..U+2EE5D, all Han Lo), which the
// regex crate behind tiktoken knows as Han letters.
func classOf(r rune) class {
	var c class
	isHan := unicode.Is(unicode.Han, r)
	isL := unicode.IsLetter(r)
	if r >= 0x2EBF0 && r <= 0x2EE5D {
		isHan, isL = true, true
	}
	isM := unicode.IsMark(r)
	if isHan {
		c |= cHan
	}
	if isL {
		c |= cL
	}
	if unicode.IsNumber(r) {
		c |= cN
	}
	if unicode.IsSpace(r) { // White_Space, as the regex crate's Unicode \s
		c |= cSpace
	}
	if r == '\r' || r == '\n' {
		c |= cCRLF
	}
	if !isHan {
		both := isM || unicode.In(r, unicode.Lm, unicode.Lo)
		if both || unicode.In(r, unicode.Lu, unicode.Lt) {
			c |= cUpper
		}
		if both || unicode.Is(unicode.Ll, r) {
			c |= cLower
		}
	}
	if c&(cCRLF|cL|cN) == 0 {
		c |= cPre
	}
	if c&(cSpace|cL|cN) == 0 {
		c |= cPunct
	}
	return c
}

// bmpClasses holds classOf for every rune of the Basic Multilingual Plane, built on first use (about a
// millisecond) so that the splitter's common path is one table load. Runes above U+FFFF (emoji, rare Han)
// call classOf directly.
var bmpClasses = sync.OnceValue(func() *[0x10000]class {
	var t [0x10000]class
	for r := range rune(0x10000) {
		t[r] = classOf(r)
	}
	return &t
})

// asciiClasses is the table for the first 128 runes, the hot path of English text and code; it needs no
// lazy initialisation.
var asciiClasses = func() (t [128]class) {
	for r := range rune(128) {
		t[r] = classOf(r)
	}
	return t
}()

// classAt decodes the character at s[i:] and returns its classes and its size in bytes. A byte that does
// not start a valid UTF-8 sequence counts as one character of size 1 and is classified as U+FFFD (a
// symbol, so punctuation for the pattern). i must be < len(s).
func classAt(s string, i int) (class, int) {
	if b := s[i]; b < utf8.RuneSelf {
		return asciiClasses[b], 1
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	if r < 0x10000 {
		return bmpClasses()[r], size
	}
	return classOf(r), size
}

// isPythonSpace reports whether Python's str.isspace is true for r: the White_Space property plus the
// four information separators U+001C..U+001F (bidi class B or S). Kimi's long-input rule, written in
// Python, uses it; the pattern's \s does not.
func isPythonSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1C && r <= 0x1F)
}
