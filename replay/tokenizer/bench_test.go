package tokenizer

import (
	"os"
	"strings"
	"testing"
)

// benchText is about 100 KB of mixed text: this package's Go source (code, English comments) and the
// multilingual training sample.
func benchText(b *testing.B) string {
	var sb strings.Builder
	for _, name := range []string{"split.go", "bpe.go", "chat.go", "train.go", "internal/trainvocab/multilingual.txt"} {
		data, err := os.ReadFile(name)
		if err != nil {
			b.Fatal(err)
		}
		sb.Write(data)
	}
	s := sb.String()
	for len(s) < 100_000 {
		s += s
	}
	return s
}

// BenchmarkSplit measures the pre-tokenizer alone; the reported MB/s is input bytes.
func BenchmarkSplit(b *testing.B) {
	text := benchText(b)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		n := 0
		for range Pieces(text) {
			n++
		}
	}
}

// BenchmarkEncode measures Encode with a warm piece cache on the K3-shaped vocabulary (163,584 tokens,
// 65,536 of them learned): input bytes per second, and tokens per second as a metric.
func BenchmarkEncode(b *testing.B) {
	tok := builtinForTest(b, 163584)
	text := benchText(b)
	ids := tok.AppendEncode(nil, text)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		ids = tok.AppendEncode(ids[:0], text)
	}
	b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkEncodeNoCache measures the BPE merge itself: every iteration uses a fresh tokenizer, whose
// cache is empty (building it is not timed).
func BenchmarkEncodeNoCache(b *testing.B) {
	tokens := mustBuiltin(b, 163584)
	text := benchText(b)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		b.StopTimer()
		tok, err := New(tokens, K3Config(len(tokens)))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		tok.AppendEncode(nil, text)
	}
}

// BenchmarkEncodeLongPiece measures a 25,000-byte piece, the longest the long-input rule allows for ASCII.
func BenchmarkEncodeLongPiece(b *testing.B) {
	tok := builtinForTest(b, 4096)
	text := strings.Repeat("ab", MaxRunChars/2)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Encode(text)
	}
}
