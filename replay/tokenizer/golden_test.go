package tokenizer

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

var update = flag.Bool("update", false, "rewrite testdata/tiktoken_corpus.jsonl.gz and testdata/golden.tiktoken.model")

// The files of the agreement check with tiktoken (see testdata/tiktoken_golden.py).
const (
	goldenCorpusFile = "testdata/tiktoken_corpus.jsonl.gz"
	goldenVocabFile  = "testdata/golden.tiktoken.model"
	goldenIDsFile    = "testdata/tiktoken_golden_ids.txt.gz"
	regexPiecesFile  = "testdata/regex_pieces.txt.gz"
	goldenVocabSize  = 4096
	goldenCommand    = "python3 replay/tokenizer/testdata/tiktoken_golden.py replay/tokenizer/testdata/golden.tiktoken.model " +
		"replay/tokenizer/testdata/tiktoken_corpus.jsonl.gz replay/tokenizer/testdata/tiktoken_golden_ids.txt.gz"
)

// corpusJSONL renders the corpus as the committed file holds it, uncompressed.
func corpusJSONL(corpus []string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b) // one line per string
	enc.SetEscapeHTML(false)
	for _, s := range corpus {
		enc.Encode(s)
	}
	return b.Bytes()
}

func goldenVocab(t *testing.T) []byte {
	var b bytes.Buffer
	if err := WriteTiktoken(&b, mustBuiltin(t, goldenVocabSize)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func readGzip(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return data
}

func TestGoldenCorpusUpToDate(t *testing.T) {
	corpus := goldenCorpus()
	if len(corpus) < 10000 {
		t.Fatalf("%d strings, want at least 10,000", len(corpus))
	}
	jsonl, vocab := corpusJSONL(corpus), goldenVocab(t)
	if *update {
		var z bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
		zw.Write(jsonl)
		zw.Close()
		if err := os.WriteFile(goldenCorpusFile, z.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(goldenVocabFile, vocab, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := readGzip(t, goldenCorpusFile); !bytes.Equal(got, jsonl) {
		t.Errorf("%s differs from goldenCorpus(): run go test -run TestGoldenCorpusUpToDate -update, then rerun the tiktoken script", goldenCorpusFile)
	}
	if got, err := os.ReadFile(goldenVocabFile); err != nil || !bytes.Equal(got, vocab) {
		t.Errorf("%s differs from BuiltinTokens(%d) (%v): run with -update", goldenVocabFile, goldenVocabSize, err)
	}
}

// TestGoldenScriptPattern keeps the Python script's pattern equal to Pattern.
func TestGoldenScriptPattern(t *testing.T) {
	script, err := os.ReadFile("testdata/tiktoken_golden.py")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), `PAT = r"""`+Pattern+`"""`) {
		t.Error("testdata/tiktoken_golden.py: PAT differs from tokenizer.Pattern")
	}
}

func TestGoldenRoundTrip(t *testing.T) {
	tok := builtinForTest(t, goldenVocabSize)
	for i, s := range goldenCorpus() {
		if !utf8.ValidString(s) {
			t.Fatalf("string %d is not valid UTF-8", i)
		}
		if got, err := tok.Decode(tok.Encode(s)); err != nil || got != s {
			t.Fatalf("string %d %.40q: round trip gives %.40q, %v", i, s, got, err)
		}
	}
}

// checkedLines reads a file written by tiktoken_golden.py: it checks the header's corpus checksum and
// count and returns the header and the lines after it, one per corpus string.
func checkedLines(t *testing.T, path string, corpus []string) (string, []string) {
	lines := strings.Split(strings.TrimSuffix(string(readGzip(t, path)), "\n"), "\n")
	sum := fmt.Sprintf("corpus_sha256=%x strings=%d", sha256.Sum256(corpusJSONL(corpus)), len(corpus))
	if !strings.HasPrefix(lines[0], "# ") || !strings.Contains(lines[0], sum) || len(lines) != len(corpus)+1 {
		t.Fatalf("%s was written for another corpus (header %q, %d lines): rerun the script", path, lines[0], len(lines))
	}
	t.Logf("%s: %s", path, lines[0])
	return lines[0], lines[1:]
}

// TestTiktokenGolden compares Encode with the ids tiktoken computed (see testdata/tiktoken_golden.py).
func TestTiktokenGolden(t *testing.T) {
	if _, err := os.Stat(goldenIDsFile); os.IsNotExist(err) {
		t.Skipf("%s is absent: on a machine with Python tiktoken, run from the repository root:\n%s", goldenIDsFile, goldenCommand)
	}
	corpus := goldenCorpus()
	header, lines := checkedLines(t, goldenIDsFile, corpus)
	if sum := fmt.Sprintf("vocab_sha256=%x", sha256.Sum256(goldenVocab(t))); !strings.Contains(header, sum) {
		t.Fatalf("%s was written for another vocabulary (header %q): rerun the script", goldenIDsFile, header)
	}
	tok := builtinForTest(t, goldenVocabSize)
	bad := 0
	for i, s := range corpus {
		want, err := parseInts(lines[i])
		if err != nil {
			t.Fatalf("line %d: %v", i+2, err)
		}
		got := tok.Encode(s)
		if !slices.Equal(got, want) {
			bad++
			if bad <= 10 {
				t.Errorf("string %d %.60q:\n pieces %.200q\n-tiktoken %v\n+go       %v", i, s, Split(s), head(want), head(got))
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d strings differ", bad, len(corpus))
	}
}

// TestRegexPieces compares Split with the pieces mrab-regex found (tiktoken_golden.py --pieces-with-regex).
func TestRegexPieces(t *testing.T) {
	if _, err := os.Stat(regexPiecesFile); os.IsNotExist(err) {
		t.Skipf("%s is absent: python3 testdata/tiktoken_golden.py --pieces-with-regex %s %s", regexPiecesFile, regexPiecesFile, goldenCorpusFile)
	}
	corpus := goldenCorpus()
	_, lines := checkedLines(t, regexPiecesFile, corpus)
	bad := 0
	for i, s := range corpus {
		want, err := parseInts(lines[i])
		if err != nil {
			t.Fatalf("line %d: %v", i+2, err)
		}
		var got []int32
		for _, p := range Split(s) {
			got = append(got, int32(utf8.RuneCountInString(p)))
		}
		if !slices.Equal(got, want) {
			bad++
			if bad <= 10 {
				t.Errorf("string %d %.60q:\n-regex lengths %v\n+go pieces     %.200q", i, s, head(want), Split(s))
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d strings differ", bad, len(corpus))
	}
}

func parseInts(line string) ([]int32, error) {
	var out []int32
	for _, f := range strings.Fields(line) {
		v, err := strconv.ParseInt(f, 10, 32)
		if err != nil {
			return nil, err
		}
		out = append(out, int32(v))
	}
	return out, nil
}

// head shortens a long id list for a failure message.
func head(ids []int32) string {
	if len(ids) > 40 {
		return fmt.Sprint(ids[:40]) + fmt.Sprintf("... (%d ids)", len(ids))
	}
	return fmt.Sprint(ids)
}

// TestRealVocabulary checks the public goldens of spec section 7 against the real K3 (or K2: the same
// tiktoken.model) tokenizer files, when POTATO_K3_TOKENIZER_DIR names a directory holding them.
func TestRealVocabulary(t *testing.T) {
	dir := os.Getenv("POTATO_K3_TOKENIZER_DIR")
	if dir == "" {
		t.Skip("set POTATO_K3_TOKENIZER_DIR to a directory with the real tiktoken.model and tokenizer_config.json")
	}
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for text, want := range map[string][]int32{
		"Hello world":              {19180, 2695},
		"你好世界":                     {33845, 2243},
		"The capital of France is": {1008, 10484, 318, 15383, 387},
		" Paris":                   {17374},
	} {
		if got := tok.Encode(text); !slices.Equal(got, want) {
			t.Errorf("Encode(%q): -want %v +got %v", text, want, got)
		}
	}
	if tok.VocabSize() != 163840 || tok.BOS() != 163584 {
		t.Errorf("VocabSize %d, BOS %d; want 163840, 163584", tok.VocabSize(), tok.BOS())
	}
}
