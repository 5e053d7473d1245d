package tokenizer

import (
	"sync"
	"testing"
	"unicode/utf8"
)

var (
	fuzzTokOnce sync.Once
	fuzzTok     *Tokenizer
	fuzzTokErr  error
)

// FuzzEncodeRoundTrip: no input makes BPE encoding or decoding panic; every id is a BPE id when specials
// are off; and decode(encode(s)) == s for any input (valid UTF-8 or not: bytes go to BPE unchanged).
func FuzzEncodeRoundTrip(f *testing.F) {
	for _, s := range []string{"", "Hello world", "don't STOP", "你好世界!", "  \r\n\t x", "<|open|>user", "\xff\xfe\x80a", "👩‍👩‍👧 e\u0301"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		fuzzTokOnce.Do(func() { fuzzTok, fuzzTokErr = Builtin(3072) })
		if fuzzTokErr != nil {
			t.Fatal(fuzzTokErr)
		}
		ids := fuzzTok.Encode(in)
		for _, id := range ids {
			if fuzzTok.IsSpecial(id) {
				t.Fatalf("Encode(%q) produced special id %d with specials disabled", in, id)
			}
		}
		out, err := fuzzTok.Decode(ids)
		if err != nil {
			t.Fatalf("Decode(Encode(%q)): %v", in, err)
		}
		if out != in {
			t.Fatalf("Decode(Encode(%q)) = %q", in, out)
		}
		special := fuzzTok.EncodeSpecial(in)
		if back, err := fuzzTok.Decode(special); err != nil || (utf8.ValidString(in) && back != in) {
			t.Fatalf("Decode(EncodeSpecial(%q)) = %q, %v", in, back, err)
		}
	})
}
