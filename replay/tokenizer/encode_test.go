package tokenizer

import (
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// handVocab is the 256 bytes plus tokens whose merges can be followed by hand.
func handVocab(t testing.TB, extra ...string) *Tokenizer {
	t.Helper()
	tokens := make([]string, 256, 256+len(extra))
	for b := range 256 {
		tokens[b] = string([]byte{byte(b)})
	}
	tok, err := New(append(tokens, extra...), K3Config(256+len(extra)))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestBPEHandVocab(t *testing.T) {
	// ids: ab 256, bc 257, abc 258, cd 259, aa 260, aaaa 261
	tok := handVocab(t, "ab", "bc", "abc", "cd", "aa", "aaaa")
	tests := []struct {
		piece string
		want  []int32
	}{
		{"abc", []int32{258}},                       // a token itself: no merging at all
		{"abcd", []int32{258, 'd'}},                 // ab (256) first, then ab+c = abc (258); cd never forms
		{"bcd", []int32{257, 'd'}},                  // bc (257) beats cd (259)
		{"xcd", []int32{'x', 259}},                  // only cd is a token
		{"aaa", []int32{260, 'a'}},                  // tie between the two aa pairs: the leftmost merges
		{"aaaaa", []int32{261, 'a'}},                // aa aa a, then aa+aa = aaaa
		{"zzz", []int32{'z', 'z', 'z'}},             // no pair is a token
		{"\xe4\xbd\xa0", []int32{0xe4, 0xbd, 0xa0}}, // bytes, not characters
	}
	for _, tt := range tests {
		if got := tok.appendBPE(nil, tt.piece); !slices.Equal(got, tt.want) {
			t.Errorf("appendBPE(%q): -want %v +got %v", tt.piece, tt.want, got)
		}
		if got := tok.appendPiece(nil, tt.piece); !slices.Equal(got, tt.want) {
			t.Errorf("appendPiece(%q): -want %v +got %v", tt.piece, tt.want, got)
		}
	}
}

// naiveBPE is the textbook definition: parts as strings, merge the leftmost adjacent pair whose
// concatenation has the lowest rank until none is a token.
func naiveBPE(tok *Tokenizer, piece string) []int32 {
	var parts []string
	for i := range len(piece) {
		parts = append(parts, piece[i:i+1])
	}
	for {
		best, bestRank := -1, int32(noRank)
		for i := 0; i+1 < len(parts); i++ {
			if r := tok.rank(parts[i] + parts[i+1]); r < bestRank {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			break
		}
		parts = slices.Replace(parts, best, best+2, parts[best]+parts[best+1])
	}
	ids := make([]int32, len(parts))
	for i, p := range parts {
		ids[i] = tok.ranks[p]
	}
	return ids
}

// TestBPEImplementationsAgree runs the three merge loops (tiktoken's quadratic one, the heap one for long
// pieces, the textbook one) on pieces cut from realistic text and from random bytes.
func TestBPEImplementationsAgree(t *testing.T) {
	tok := builtinForTest(t, 4096)
	rng := newSplitMix(7)
	alphabet := []string{"e", "t", "a", " ", "th", "in", "ing", "的", "字", "\t", "//", "0", "é", "ж", "\xff"}
	for n := range 3000 {
		var b strings.Builder
		for range 1 + rng.intn(40) {
			b.WriteString(alphabet[rng.intn(len(alphabet))])
		}
		if n%3 == 0 {
			b.WriteByte(byte(rng.next()))
		}
		piece := b.String()
		if len(piece) < 2 {
			continue
		}
		want := naiveBPE(tok, piece)
		if got := tok.appendBPE(nil, piece); !slices.Equal(got, want) {
			t.Fatalf("appendBPE(%q): -want %v +got %v", piece, want, got)
		}
		if got := tok.appendBPELarge(nil, piece); !slices.Equal(got, want) {
			t.Fatalf("appendBPELarge(%q): -want %v +got %v", piece, want, got)
		}
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	tok := builtinForTest(t, 4096)
	inputs := []string{
		"", "Hello world", "你好世界", "The capital of France is", "func main() {\n\tfmt.Println(\"hi\")\n}\n",
		"DON'T PANIC, it's 42!!!\r\n\r\n", "👨\u200d👩\u200d👧 ❤\ufe0f 1\ufe0f\u20e3", "e\u0301 ǅ ʰ ª 〇 ⺀",
		strings.Repeat("a", MaxRunChars+10), strings.Repeat(" ", 3000) + "x", strings.Repeat("!?", 200),
		"\xff\xfe invalid \xe4\xbd bytes", "<|open|>message<|sep|>",
	}
	rng := newSplitMix(3)
	for range 300 {
		var b strings.Builder
		for range rng.intn(30) {
			b.WriteRune(oracleAlphabet[rng.intn(len(oracleAlphabet))])
		}
		inputs = append(inputs, b.String())
	}
	for _, in := range inputs {
		ids := tok.Encode(in)
		got, err := tok.Decode(ids)
		if err != nil || got != in {
			t.Errorf("Decode(Encode(%.40q)) = %.40q, %v", in, got, err)
		}
		for _, id := range ids {
			if tok.IsSpecial(id) {
				t.Errorf("Encode(%.40q) produced special id %d", in, id)
			}
		}
	}
}

// TestEncodeConcurrent encodes from several goroutines through one shared piece cache (run with -race).
func TestEncodeConcurrent(t *testing.T) {
	tok := builtinForTest(t, 4096)
	fresh := builtinForTest(t, 4096)
	corpus := goldenCorpus()[:2000]
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(corpus); i++ {
				if got, want := tok.Encode(corpus[i]), fresh.appendChunkNoCache(corpus[i]); !slices.Equal(got, want) {
					t.Errorf("goroutine %d, string %d: -want %v +got %v", g, i, want, got)
					return
				}
			}
		})
	}
	wg.Wait()
}

// appendChunkNoCache encodes text without reading or writing the piece cache.
func (t *Tokenizer) appendChunkNoCache(text string) []int32 {
	var ids []int32
	for p := range Pieces(text) {
		if id, ok := t.ranks[p]; ok {
			ids = append(ids, id)
		} else {
			ids = t.appendBPE(ids, p)
		}
	}
	return ids
}

func TestEncodeSpecial(t *testing.T) {
	tok := builtinForTest(t, 4096)
	open, _ := tok.SpecialID("<|open|>")
	sep, _ := tok.SpecialID("<|sep|>")
	text := "a<|open|>b<|sep|><|sep|>c<|opem|>"
	ids := tok.EncodeSpecial(text)
	var specials []int32
	for _, id := range ids {
		if tok.IsSpecial(id) {
			specials = append(specials, id)
		}
	}
	if want := []int32{open, sep, sep}; !slices.Equal(specials, want) {
		t.Errorf("EncodeSpecial(%q) specials: -want %v +got %v", text, want, specials)
	}
	if got, _ := tok.Decode(ids); got != text {
		t.Errorf("Decode(EncodeSpecial) = %q, want %q", got, text)
	}
	if want := tok.Encode("a"); !slices.Equal(ids[:len(want)], want) {
		t.Errorf("text before a special: -want %v +got %v", want, ids[:len(want)])
	}
	for _, id := range tok.Encode(text) {
		if tok.IsSpecial(id) {
			t.Errorf("Encode(%q) produced special id %d", text, id)
		}
	}
}

func TestDecodeOutOfRange(t *testing.T) {
	tok := builtinForTest(t, 4096)
	for _, id := range []int32{-1, int32(tok.VocabSize())} {
		if _, err := tok.Decode([]int32{1, id}); err == nil {
			t.Errorf("Decode(%d): no error", id)
		}
	}
}

func TestPiece(t *testing.T) {
	tok := handVocab(t, "\xe4\xbd", "a\nb", `\x`)
	open, _ := tok.SpecialID("<|open|>")
	tests := []struct {
		id   int32
		want string
	}{
		{'a', "a"},
		{0xe4, "<0xE4>"},
		{256, "<0xE4><0xBD>"},
		{257, `a\nb`},
		{258, `\\x`},
		{'\t', `\t`},
		{0, `\x00`},
		{open, "<|open|>"},
		{int32(tok.VocabSize()), "<bad id 515>"},
	}
	for _, tt := range tests {
		if got := tok.Piece(tt.id); got != tt.want {
			t.Errorf("Piece(%d) = %q, want %q", tt.id, got, tt.want)
		}
	}
	if got := DisplayBytes("\u0085é\xbd"); got != `\u0085é<0xBD>` || !utf8.ValidString(got) {
		t.Errorf("DisplayBytes = %q", got)
	}
}

// builtinForTest returns the builtin tokenizer of n BPE tokens, built once per size.
func builtinForTest(t testing.TB, n int) *Tokenizer {
	t.Helper()
	tok, err := Builtin(n)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestEncodeLimit checks that EncodeLimit equals Encode up to its limit, and past it stops: a 16 MB text
// under a limit of 100 tokens allocates a few kB of ids, not the text's millions.
func TestEncodeLimit(t *testing.T) {
	tok, err := Builtin(3072)
	if err != nil {
		t.Fatal(err)
	}
	text := "The capital of France is Paris. 你好世界 " + strings.Repeat("ab ", 40)
	want := tok.Encode(text)
	for _, limit := range []int{len(want), len(want) + 1, 1 << 20} {
		got, ok := tok.EncodeLimit(text, limit)
		if !ok || !slices.Equal(got, want) {
			t.Errorf("limit %d: -want %v, true +got %v, %v", limit, want, got, ok)
		}
	}
	if got, ok := tok.EncodeLimit(text, len(want)-1); ok || len(got) < len(want)-1 || !slices.Equal(got, want[:len(got)]) {
		t.Errorf("limit %d: -want a prefix of %v, false +got %v, %v", len(want)-1, want, got, ok)
	}
	huge := strings.Repeat("word ", 16<<20/5)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, ok := tok.EncodeLimit(huge, 100)
	runtime.ReadMemStats(&after)
	if ok || len(got) > 200 {
		t.Errorf("16 MB text, limit 100: got %d ids, ok %v", len(got), ok)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("16 MB text, limit 100: allocated %d bytes, want under 1 MiB", alloc)
	}
}

// EncodeTextLimit is EncodeText within its limit, in both special modes, and refuses a text past it.
func TestEncodeTextLimit(t *testing.T) {
	tok := builtinForTest(t, 3072)
	text := "Hello <|im_end|> world, hello again."
	for _, special := range []bool{false, true} {
		want := tok.EncodeText(text, special)
		for _, limit := range []int{len(want), len(want) + 5} {
			got, ok := tok.EncodeTextLimit(text, special, limit)
			if !ok || !slices.Equal(got, want) {
				t.Errorf("special %v, limit %d: ok %v, %v; want %v", special, limit, ok, got, want)
			}
		}
		if got, ok := tok.EncodeTextLimit(text, special, len(want)-1); ok || got != nil {
			t.Errorf("special %v, limit %d (one short): ok %v, %d tokens", special, len(want)-1, ok, len(got))
		}
	}
}
