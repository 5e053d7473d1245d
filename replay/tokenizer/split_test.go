package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

// Each expectation below is reasoned out from the pattern by hand; the comment says which alternative
// (numbered as in pieceEnd) produces the piece that matters.
func TestSplitHandWritten(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", nil},
		{"words", "Hello world", []string{"Hello", " world"}},
		// (7): two spaces before a letter: the first is a run that leaves one space for " Hello" (2).
		{"two spaces", "  Hello", []string{" ", " Hello"}},
		{"camel case", "HelloWorld", []string{"Hello", "World"}},
		// (2): U* takes HELLO and the lower part follows directly.
		{"caps then lower", "HELLOworld", []string{"HELLOworld"}},
		// (3): no lower letter follows, so U+ with the contraction.
		{"all caps contraction", "DON'T I'M", []string{"DON'T", " I'M"}},
		{"contractions", "don't we'LL they'Re you'vE it'd", []string{"don't", " we'LL", " they'Re", " you'vE", " it'd"}},
		// Unicode case folding makes U+017F LONG S an s.
		{"long s contraction", "it'ſ", []string{"it'ſ"}},
		{"not a contraction", "it'x", []string{"it", "'x"}},
		{"double contraction", "abc's's", []string{"abc's", "'s"}},
		{"contraction ll needs two", "we'l", []string{"we", "'l"}},
		// (2) backtracking: ʰ (Lm) is in both classes, so U* gives it back to L+.
		{"modifier letter at end", "ABʰ.", []string{"ABʰ", "."}},
		{"lo after upper", "Aא", []string{"Aא"}},
		{"titlecase", "ǅemal ǅ", []string{"ǅemal", " ǅ"}},
		// (1) before everything: Han never joins a prefix or letters.
		{"han then latin", "你好世界abc", []string{"你好世界", "abc"}},
		{"latin then han", "abc你好", []string{"abc", "你好"}},
		{"space before han", " 你好", []string{" ", "你好"}},
		{"han punctuation", "你好，世界。", []string{"你好", "，", "世界", "。"}},
		{"kanji katakana", "東京タワー", []string{"東京", "タワー"}},
		{"han numeral in digits", "1〇2", []string{"1〇2"}},
		{"han numeral first", "〇1", []string{"〇", "1"}},
		// (4)
		{"digits", "1234567", []string{"123", "456", "7"}},
		{"arabic-indic digits", "٣٤٥٦", []string{"٣٤٥", "٦"}},
		{"space before digits", " 123", []string{" ", "123"}},
		{"letters then digits", "x1", []string{"x", "1"}},
		// (5)
		{"punct", "...", []string{"..."}},
		{"space punct", "a ...", []string{"a", " ..."}},
		{"punct newlines", "!!\n\nabc", []string{"!!\n\n", "abc"}},
		{"dollar word", "$Hello", []string{"$Hello"}},
		{"two dollars", "$$Hello", []string{"$$", "Hello"}},
		{"special text", "<|open|>", []string{"<|", "open", "|>"}},
		// (6), (7), (8)
		{"blank lines", "a  \n\n  b", []string{"a", "  \n\n", " ", " b"}},
		{"trailing spaces", "a   ", []string{"a", "   "}},
		{"space tab space", "a \t b", []string{"a", " \t", " b"}},
		{"crlf", "a\r\nb", []string{"a", "\r\n", "b"}},
		{"tabs", "\t\tfoo  \n", []string{"\t", "\tfoo", "  \n"}},
		{"newline alone", "\n", []string{"\n"}},
		// NBSP and ideographic space are White_Space and may prefix a word.
		{"nbsp", "a\u00a0b", []string{"a", "\u00a0b"}},
		{"ideographic space", "a\u3000b", []string{"a", "\u3000b"}},
		// U+001C is not \s (it is Python whitespace, which only the long-input rule uses).
		{"file separator", "a\x1cb", []string{"a", "\x1cb"}},
		// Marks are in both letter classes and in the prefix class.
		{"combining acute", "e\u0301t\u00e9", []string{"e\u0301t\u00e9"}},
		{"leading mark", "\u0301abc", []string{"\u0301abc"}},
		{"mark after digit", "1\u0301", []string{"1", "\u0301"}},
		{"arabic", "مرحبا بالعالم", []string{"مرحبا", " بالعالم"}},
		{"emoji skin tone", "hi 👋🏽", []string{"hi", " 👋🏽"}},
		{"zwj family", "👨\u200d👩\u200d👧", []string{"👨\u200d👩\u200d👧"}},
		{"keycap", "1\ufe0f\u20e3", []string{"1", "\ufe0f\u20e3"}},
		// Invalid bytes classify as U+FFFD: punctuation, and a possible prefix.
		{"invalid byte prefix", "a\xffb", []string{"a", "\xffb"}},
		{"invalid bytes", "\xff\xfe", []string{"\xff\xfe"}},
		{"cut han", "\xe4\xbd", []string{"\xe4\xbd"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Split(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("Split(%q):\n-want %q\n+got  %q", tt.in, tt.want, got)
			}
		})
	}
}

// The long-input rule: runs of more than MaxRunChars whitespace or non-whitespace characters are cut,
// and no match crosses the cut.
func TestSplitLongRuns(t *testing.T) {
	a := strings.Repeat("a", MaxRunChars)
	sp := strings.Repeat(" ", MaxRunChars)
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"letters at the limit", a, []string{a}},
		{"letters over the limit", a + "a", []string{a, "a"}},
		// The run counts characters, not bytes, and restarts at whitespace.
		{"run restarts", a[1:] + " " + a, []string{a[1:], " " + a}},
		// The cut chunk ends in spaces: (7) takes them all at the end of the chunk.
		{"spaces over the limit", sp + "     x", []string{sp, "    ", " x"}},
		// Python's isspace counts U+001C as whitespace, so it ends a non-space run without a cut.
		{"file separator ends a run", a[1:] + "\x1c" + "aa", []string{a[1:], "\x1caa"}},
		{"punct does not", a[1:] + "!" + "aa", []string{a[1:], "!", "aa"}},
		{"han run", strings.Repeat("字", MaxRunChars+2), []string{strings.Repeat("字", MaxRunChars), "字字"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Split(tt.in)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Split: got %d pieces of lengths %v, want lengths %v", len(got), lens(got), lens(tt.want))
			}
		})
	}
}

// TestSplitMaxEncodeChars checks the 400,000-character cut: "ab " repeated 133,335 times puts the cut
// after an "a", so the text ends in " a" | "b", " ab", " " instead of " ab", " ab", " ".
func TestSplitMaxEncodeChars(t *testing.T) {
	in := strings.Repeat("ab ", 133_335)
	got := Split(in)
	want := []string{" ab", " a", "b", " ab", " "}
	if len(got) < 5 || !slices.Equal(got[len(got)-5:], want) {
		t.Errorf("last pieces: got %q, want %q", got[max(0, len(got)-5):], want)
	}
	if strings.Join(got, "") != in {
		t.Error("pieces do not concatenate to the input")
	}
}

func lens(ps []string) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = len(p)
	}
	return out
}
