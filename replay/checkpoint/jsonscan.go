package checkpoint

import (
	"fmt"
	"math"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is a strict, allocation-light JSON reader for the two documents this package parses: shard
// headers and the index. K3 has 497,220 tensors, so the headers and the index together are over 100 MB of
// JSON; encoding/json into maps spends most of Open's time there and silently keeps the last of two
// duplicate keys, while a duplicate tensor name is damage we must refuse. The scanner reads the grammar of
// RFC 8259 (the fuzz targets check that whatever it accepts, encoding/json accepts too) and hands object
// keys to a callback without copying unless the key has escapes.
type scanner struct {
	data []byte
	pos  int
	buf  []byte // scratch for keys with escapes
}

// maxDepth bounds the nesting of values skipped as unknown, so hostile input cannot recurse without end.
const maxDepth = 64

// syntaxError is a JSON problem at a byte offset of the document.
type syntaxError struct {
	pos int
	msg string
}

func (e *syntaxError) Error() string { return fmt.Sprintf("JSON byte %d: %s", e.pos, e.msg) }

func (s *scanner) errorf(format string, args ...any) error {
	return &syntaxError{pos: s.pos, msg: fmt.Sprintf(format, args...)}
}

// ws skips JSON whitespace.
func (s *scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// next returns the next non-space byte without consuming it, or 0 at the end (a NUL byte in the
// document also reads as 0: callers that accept 0 must check s.pos against the length).
func (s *scanner) next() byte {
	s.ws()
	if s.pos >= len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

func (s *scanner) expect(c byte) error {
	if got := s.next(); got != c || s.pos >= len(s.data) {
		if s.pos >= len(s.data) {
			return s.errorf("unexpected end, want %q", c)
		}
		return s.errorf("found %q, want %q", got, c)
	}
	s.pos++
	return nil
}

// end checks that only whitespace follows the document (safetensors pads headers with spaces).
func (s *scanner) end() error {
	if s.ws(); s.pos < len(s.data) {
		return s.errorf("unexpected %q after the end of the document", s.data[s.pos])
	}
	return nil
}

// object reads an object, calling member for each key with the scanner positioned at the value; member
// must consume the value. The key slice is valid only during the call.
func (s *scanner) object(member func(key []byte) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.next() == '}' {
		s.pos++
		return nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := member(key); err != nil {
			return err
		}
		switch s.next() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.errorf("want ',' or '}' in object")
		}
	}
}

// array reads an array, calling elem for each element; elem must consume it.
func (s *scanner) array(elem func(i int) error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.next() == ']' {
		s.pos++
		return nil
	}
	for i := 0; ; i++ {
		if err := elem(i); err != nil {
			return err
		}
		switch s.next() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.errorf("want ',' or ']' in array")
		}
	}
}

// str reads a string and returns its UTF-8 bytes: a sub-slice of the document when it has no escapes,
// else the scanner's scratch buffer. Either is valid only until the next call.
func (s *scanner) str() ([]byte, error) {
	if err := s.expect('"'); err != nil {
		return nil, err
	}
	start := s.pos
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			return s.data[start : s.pos-1], nil
		case c == '\\':
			s.buf = append(s.buf[:0], s.data[start:s.pos]...)
			return s.escaped()
		case c < 0x20:
			return nil, s.errorf("control character %#02x in string", c)
		case c < utf8.RuneSelf:
			s.pos++
		default:
			r, n := utf8.DecodeRune(s.data[s.pos:])
			if r == utf8.RuneError && n == 1 {
				return nil, s.errorf("invalid UTF-8 in string")
			}
			s.pos += n
		}
	}
	return nil, s.errorf("unterminated string")
}

// escaped finishes a string that has escapes, appending to s.buf.
func (s *scanner) escaped() ([]byte, error) {
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			return s.buf, nil
		case c == '\\':
			if s.pos+1 >= len(s.data) {
				return nil, s.errorf("unterminated escape")
			}
			e := s.data[s.pos+1]
			s.pos += 2
			switch e {
			case '"', '\\', '/':
				s.buf = append(s.buf, e)
			case 'b':
				s.buf = append(s.buf, '\b')
			case 'f':
				s.buf = append(s.buf, '\f')
			case 'n':
				s.buf = append(s.buf, '\n')
			case 'r':
				s.buf = append(s.buf, '\r')
			case 't':
				s.buf = append(s.buf, '\t')
			case 'u':
				r, err := s.hex4()
				if err != nil {
					return nil, err
				}
				if utf16.IsSurrogate(r) {
					// Only a high surrogate followed by an escaped low one makes a character.
					if s.pos+1 >= len(s.data) || s.data[s.pos] != '\\' || s.data[s.pos+1] != 'u' {
						return nil, s.errorf("lone UTF-16 surrogate in \\u escape")
					}
					s.pos += 2
					r2, err := s.hex4()
					if err != nil {
						return nil, err
					}
					if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
						return nil, s.errorf("invalid UTF-16 surrogate pair in \\u escape")
					}
				}
				s.buf = utf8.AppendRune(s.buf, r)
			default:
				return nil, s.errorf("invalid escape \\%c", e)
			}
		case c < 0x20:
			return nil, s.errorf("control character %#02x in string", c)
		case c < utf8.RuneSelf:
			s.buf = append(s.buf, c)
			s.pos++
		default:
			r, n := utf8.DecodeRune(s.data[s.pos:])
			if r == utf8.RuneError && n == 1 {
				return nil, s.errorf("invalid UTF-8 in string")
			}
			s.buf = append(s.buf, s.data[s.pos:s.pos+n]...)
			s.pos += n
		}
	}
	return nil, s.errorf("unterminated string")
}

func (s *scanner) hex4() (rune, error) {
	if s.pos+4 > len(s.data) {
		return 0, s.errorf("short \\u escape")
	}
	var r rune
	for _, c := range s.data[s.pos : s.pos+4] {
		r <<= 4
		switch {
		case '0' <= c && c <= '9':
			r |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			r |= rune(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, s.errorf("invalid hex digit %q in \\u escape", c)
		}
	}
	s.pos += 4
	return r, nil
}

// uint reads a non-negative JSON integer that fits int64. Sizes and offsets are integers: a fraction, an
// exponent, a sign or an overflow is refused rather than rounded.
func (s *scanner) uint() (int64, error) {
	c := s.next()
	switch {
	case c == '-':
		return 0, s.errorf("negative number, want a non-negative integer")
	case c < '0' || c > '9':
		return 0, s.errorf("want a non-negative integer")
	}
	start := s.pos
	var v int64
	for s.pos < len(s.data) && '0' <= s.data[s.pos] && s.data[s.pos] <= '9' {
		d := int64(s.data[s.pos] - '0')
		if v > (math.MaxInt64-d)/10 {
			return 0, s.errorf("integer overflows int64")
		}
		v = v*10 + d
		s.pos++
	}
	if s.data[start] == '0' && s.pos-start > 1 {
		return 0, s.errorf("leading zero in number")
	}
	if s.pos < len(s.data) {
		if c := s.data[s.pos]; c == '.' || c == 'e' || c == 'E' {
			return 0, s.errorf("want an integer, found a fraction or exponent")
		}
	}
	return v, nil
}

// skip consumes any JSON value (fields this package does not use).
func (s *scanner) skip(depth int) error {
	if depth > maxDepth {
		return s.errorf("nesting deeper than %d", maxDepth)
	}
	switch c := s.next(); {
	case c == '{':
		return s.object(func([]byte) error { return s.skip(depth + 1) })
	case c == '[':
		return s.array(func(int) error { return s.skip(depth + 1) })
	case c == '"':
		_, err := s.str()
		return err
	case c == '-' || ('0' <= c && c <= '9'):
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case s.pos >= len(s.data):
		return s.errorf("unexpected end, want a value")
	default:
		return s.errorf("unexpected %q, want a value", c)
	}
}

func (s *scanner) literal(word string) error {
	if len(s.data)-s.pos < len(word) || string(s.data[s.pos:s.pos+len(word)]) != word {
		return s.errorf("invalid literal, want %s", word)
	}
	s.pos += len(word)
	return nil
}

// number consumes -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() error {
	if s.pos < len(s.data) && s.data[s.pos] == '-' {
		s.pos++
	}
	digits := func() int {
		n := 0
		for s.pos < len(s.data) && '0' <= s.data[s.pos] && s.data[s.pos] <= '9' {
			s.pos++
			n++
		}
		return n
	}
	start := s.pos
	if n := digits(); n == 0 || (n > 1 && s.data[start] == '0') {
		return s.errorf("invalid number")
	}
	if s.pos < len(s.data) && s.data[s.pos] == '.' {
		s.pos++
		if digits() == 0 {
			return s.errorf("invalid number: no digits after '.'")
		}
	}
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.data) && (s.data[s.pos] == '+' || s.data[s.pos] == '-') {
			s.pos++
		}
		if digits() == 0 {
			return s.errorf("invalid number: no digits in exponent")
		}
	}
	return nil
}
