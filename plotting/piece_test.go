package plotting

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

func TestPieceSegments(t *testing.T) {
	text := func(s string) pieceSeg { return pieceSeg{segText, s} }
	nl, tab := pieceSeg{segNewline, `\n`}, pieceSeg{segTab, `\t`}
	mark := func(s string) pieceSeg { return pieceSeg{segMark, s} }
	for _, tt := range []struct {
		piece string
		want  []pieceSeg
	}{
		{"", nil},
		{" the", []pieceSeg{text(" the")}},
		{`a\nb`, []pieceSeg{text("a"), nl, text("b")}},
		{`\n\n`, []pieceSeg{nl, nl}},
		{`C:\\dir\\n`, []pieceSeg{text(`C:\dir\n`)}}, // a doubled backslash is one; the n after it is text
		{`\tx\r\n`, []pieceSeg{tab, text("x"), mark(`\r`), nl}},
		{`\x07\u0085<0xE4><0xb8>`, []pieceSeg{mark(`\x07`), mark(`\u0085`), mark("<0xE4>"), mark("<0xb8>")}},
		{"你好", []pieceSeg{text("你好")}},
		// Raw text from a row built by hand: real newlines and tabs, stray backslashes, a short escape.
		{"a\nb\tc", []pieceSeg{text("a"), nl, text("b"), tab, text("c")}},
		{`\q \x0 <0x4> <|im_end|> \`, []pieceSeg{text(`\q \x0 <0x4> <|im_end|> \`)}},
	} {
		if got := pieceSegments(tt.piece); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("pieceSegments(%q):\n-want %v\n+got  %v", tt.piece, tt.want, got)
		}
	}
}

// TestPieceSegmentsUndoDisplayBytes checks that the strips read every escape the engine writes: decoding
// the segments of DisplayBytes(s) gives s back, for random byte strings of the characters the display
// form escapes. ('<' is left out: DisplayBytes leaves a raw "<0x41>" as it is, which reads as the escape
// of one byte; no tokenizer piece holds that text.)
func TestPieceSegmentsUndoDisplayBytes(t *testing.T) {
	alphabet := []string{"a", " ", "\n", "\t", "\r", `\`, "n", "x", "u", "0", "\x00", "\x07", "\x7f", "\xc3", "\xa9", "\u0085", "é", "你"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		raw := b.String()
		piece := tokenizer.DisplayBytes(raw)
		if got := undoSegments(t, pieceSegments(piece)); got != raw {
			t.Fatalf("DisplayBytes(%q) = %q reads back as %q", raw, piece, got)
		}
	}
}

// undoSegments turns segments back into the raw bytes they stand for.
func undoSegments(t *testing.T, segs []pieceSeg) string {
	t.Helper()
	var b strings.Builder
	for _, s := range segs {
		switch {
		case s.kind == segText:
			b.WriteString(s.text)
		case s.kind == segNewline:
			b.WriteByte('\n')
		case s.kind == segTab:
			b.WriteByte('\t')
		case strings.HasPrefix(s.text, "<0x"):
			v, err := strconv.ParseUint(s.text[3:5], 16, 8)
			if err != nil {
				t.Fatal(err)
			}
			b.WriteByte(byte(v))
		default: // \r, \x07, \u0085: Go's own escapes
			r, _, _, err := strconv.UnquoteChar(s.text, 0)
			if err != nil {
				t.Fatalf("%q: %v", s.text, err)
			}
			b.WriteRune(r)
		}
	}
	return b.String()
}
