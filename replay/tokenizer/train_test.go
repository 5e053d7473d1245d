package tokenizer

import (
	"crypto/sha256"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestTrainHand follows the merges of a tiny corpus by hand. Pieces: "hug", " hug" x2, " pug", " pun",
// " bun", " hugs". Counts: u+g 5 > h+u 4, so "ug"; then h+ug 4 -> "hug"; then " "+hug 3 -> " hug"; then
// " "+p and u+n tie at 2 and the smaller left id (the space, 32) wins: " p"; then "un". Every pair left
// occurs once, so training stops at 261 tokens.
func TestTrainHand(t *testing.T) {
	docs := slices.Values([]string{"hug hug hug pug pun bun hugs"})
	tokens, err := Train(docs, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ug", "hug", " hug", " p", "un"}; !slices.Equal(tokens[256:], want) {
		t.Errorf("merges: -want %q +got %q", want, tokens[256:])
	}
	short, err := Train(docs, 258)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(short, tokens[:258]) {
		t.Errorf("a shorter run is not a prefix: %q", short[256:])
	}
	for b := range 256 {
		if tokens[b] != string([]byte{byte(b)}) {
			t.Fatalf("token %d is %q", b, tokens[b])
		}
	}
	if _, err := Train(docs, 255); err == nil {
		t.Error("Train(255): no error")
	}
}

// TestTrainMultilingual trains on the project's multilingual sample and checks what any vocabulary must
// satisfy: distinct tokens, each the concatenation of two earlier ones (MarshalCompact checks both), and
// that encoding the training text round-trips and compresses.
func TestTrainMultilingual(t *testing.T) {
	text, err := os.ReadFile("internal/trainvocab/multilingual.txt")
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := Train(slices.Values([]string{string(text), string(text)}), 3000)
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens) != 3000 {
		t.Fatalf("learned %d tokens, want 3000", len(tokens))
	}
	data, err := MarshalCompact(tokens)
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalCompact(data)
	if err != nil || !slices.Equal(back, tokens) {
		t.Fatalf("compact round trip: %v", err)
	}
	tok, err := New(tokens, K3Config(len(tokens)))
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(string(text))
	if got, _ := tok.Decode(ids); got != string(text) {
		t.Error("round trip of the training text failed")
	}
	if ratio := float64(len(text)) / float64(len(ids)); ratio < 3 {
		t.Errorf("%.2f bytes per token on the training text; BPE learned little", ratio)
	}
}

func TestPad(t *testing.T) {
	bytesOnly, _ := Train(slices.Values([]string{""}), 256)
	tests := []struct {
		name string
		base []string
		n    int
	}{
		{"from single bytes", bytesOnly, 2000},
		{"from learned", mustBuiltin(t, 1000), 5000},
		{"truncate", mustBuiltin(t, 1000), 700},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Pad(tt.base, tt.n)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.n || !slices.Equal(got[:min(tt.n, len(tt.base))], tt.base[:min(tt.n, len(tt.base))]) {
				t.Fatalf("got %d tokens or a changed prefix", len(got))
			}
			if _, err := MarshalCompact(got); err != nil { // distinct, each a concatenation of earlier ones
				t.Fatal(err)
			}
			again, _ := Pad(tt.base, tt.n)
			if !slices.Equal(again, got) {
				t.Error("Pad is not deterministic")
			}
		})
	}
	if _, err := Pad(bytesOnly[:256], 1<<20); err == nil {
		t.Error("Pad beyond what the base can make: no error")
	}
}

func TestBuiltinTokens(t *testing.T) {
	full, err := BuiltinTokens(163584)
	if err != nil {
		t.Fatal(err)
	}
	if len(full) != 163584 {
		t.Fatalf("got %d tokens", len(full))
	}
	if _, err := MarshalCompact(full); err != nil {
		t.Fatal(err)
	}
	small := mustBuiltin(t, 3000)
	if !slices.Equal(small, full[:3000]) {
		t.Error("BuiltinTokens(3000) is not a prefix of BuiltinTokens(163584)")
	}
	if _, err := BuiltinTokens(100); err == nil {
		t.Error("BuiltinTokens(100): no error")
	}
}

// TestEmbeddedProvenance checks that data/learned.txt describes the embedded file (its checksum).
func TestEmbeddedProvenance(t *testing.T) {
	record, err := os.ReadFile("data/learned.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("learned.bpe %d bytes, sha256 %x", len(learnedCompact), sha256.Sum256(learnedCompact))
	if !strings.Contains(string(record), want) {
		t.Errorf("data/learned.txt does not contain %q: regenerate with internal/trainvocab", want)
	}
	tokens, err := learned()
	if err != nil || len(tokens) != LearnedSize {
		t.Errorf("embedded vocabulary: %d tokens, %v; want %d", len(tokens), err, LearnedSize)
	}
}

func mustBuiltin(t testing.TB, n int) []string {
	t.Helper()
	tokens, err := BuiltinTokens(n)
	if err != nil {
		t.Fatal(err)
	}
	return tokens
}
