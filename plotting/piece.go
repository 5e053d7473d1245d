package plotting

import "strings"

// Token text as the engine's tables hold it (the token and topk_tokens columns) is the tokenizer's
// display form, replay/tokenizer's DisplayBytes: a newline is the two characters \n, a tab \t, a carriage
// return \r, another control character \x07 or \u0085, a backslash \\, and a byte that is not part of
// valid UTF-8 (a third of a Han character) <0xE4>. The strips draw what those escapes stand for: a \n
// breaks the line, a \\ is one backslash. A row built by hand with raw text works too: a real newline or
// tab is taken as the escape would be.

// segKind is what one segment of a token's text stands for.
type segKind int

const (
	segText    segKind = iota // text drawn as it is
	segNewline                // a newline: a faint mark, then the line breaks
	segTab                    // a tab: a faint mark
	segMark                   // an escape for a byte that has no glyph (\r, \x07, \u0085, <0xE4>): drawn faint, as written
)

// pieceSeg is one segment of a token's text; text is what a segText draws and the escape of the others.
type pieceSeg struct {
	kind segKind
	text string
}

// pieceSegments splits piece, in the display form, into the segments the strips draw. A backslash that
// starts no escape of the display form (raw text can hold one) stays a backslash.
func pieceSegments(piece string) []pieceSeg {
	var segs []pieceSeg
	var text strings.Builder
	add := func(kind segKind, s string) {
		if text.Len() > 0 {
			segs = append(segs, pieceSeg{segText, text.String()})
			text.Reset()
		}
		segs = append(segs, pieceSeg{kind, s})
	}
	for i := 0; i < len(piece); {
		rest := piece[i:]
		switch {
		case rest[0] == '\n':
			add(segNewline, `\n`)
			i++
		case rest[0] == '\t':
			add(segTab, `\t`)
			i++
		case rest[0] == '\r':
			add(segMark, `\r`)
			i++
		case strings.HasPrefix(rest, `\\`):
			text.WriteByte('\\')
			i += 2
		case strings.HasPrefix(rest, `\n`):
			add(segNewline, `\n`)
			i += 2
		case strings.HasPrefix(rest, `\t`):
			add(segTab, `\t`)
			i += 2
		case strings.HasPrefix(rest, `\r`):
			add(segMark, `\r`)
			i += 2
		case strings.HasPrefix(rest, `\x`) && len(rest) >= 4 && isHex(rest[2:4]):
			add(segMark, rest[:4])
			i += 4
		case strings.HasPrefix(rest, `\u`) && len(rest) >= 6 && isHex(rest[2:6]):
			add(segMark, rest[:6])
			i += 6
		case strings.HasPrefix(rest, "<0x") && len(rest) >= 6 && isHex(rest[3:5]) && rest[5] == '>':
			add(segMark, rest[:6])
			i += 6
		default: // bytes copied one by one: only ASCII starts an escape, so UTF-8 stays whole
			text.WriteByte(rest[0])
			i++
		}
	}
	if text.Len() > 0 {
		segs = append(segs, pieceSeg{segText, text.String()})
	}
	return segs
}

// isHex reports whether s is all hexadecimal digits (DisplayBytes writes <0xE4> in upper case and \x07
// in lower case; either is taken).
func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// quotePiece quotes a token piece as the tables hold it (the display form above), escaping only the double
// quote: for the text of most tokens this is strconv.Quote of the raw text, the label a decoder gives. A
// raw newline, tab or carriage return (a row built by hand) is escaped as the display form would have it,
// so that a label stays on one line.
func quotePiece(piece string) string {
	return `"` + rawEscapes.Replace(piece) + `"`
}

// rawEscapes escapes the double quote, and the raw control characters a hand-built row may hold.
var rawEscapes = strings.NewReplacer(`"`, `\"`, "\n", `\n`, "\t", `\t`, "\r", `\r`)
