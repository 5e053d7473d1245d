// Command corpus writes the training data of the demo model (package demomodel) as token ids of the
// project's own tokenizer, so that the trainer (k3_ref/train) consumes exactly the ids the engine sees.
//
// The corpus is real text under clean licenses plus conversations written for this project:
//   - Newton's Opticks (src/testdata/Isaac.Newton-Opticks.txt of the Go tree, public domain);
//   - the Go tree's doc/ (Markdown and HTML: the language spec, the memory model; BSD-3-Clause);
//   - the non-test Go files of a few standard packages whose doc comments are prose (BSD-3-Clause);
//   - replay/tokenizer/internal/trainvocab/multilingual.txt (written for this project), repeated;
//   - conversations.jsonl beside this file (written for this project) and generated conversations
//     (gen.go: arithmetic, counting, unit conversions, days of the week, in several phrasings), rendered
//     by the project's XTML encoder with thinking on and off, so the model learns the structure tokens
//     and channels.
//
// Every source is cut into chunks of about 2,000 bytes at line ends; unit i (1-based, over all sources in
// this order; a conversation is one unit) goes to the held-out split when i % 10 == 0; a repeat of a
// unit keeps the split of its first occurrence. Each chunk is encoded on its
// own and followed by [EOS]. The output directory gets train.u16 and heldout.u16 (little-endian uint16
// ids) and manifest.json (sources with their SHA-256, byte and token counts).
//
// Usage (from the repository root, a few seconds):
//
//	go run ./replay/demomodel/internal/corpus -goroot /usr/local/go -out /tmp/corpus
package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// NumBPE is the demo model's vocabulary: the first 3,072 learned tokens and the 256 specials (3,328 ids).
const NumBPE = 3072

// goPackages are the standard packages whose non-test Go files enter the corpus.
var goPackages = []string{"bufio", "bytes", "container/list", "container/ring", "errors", "fmt", "sort", "strings", "unicode/utf8", "path", "time", "io"}

// heldOutEvery sends every tenth chunk (or conversation) to the held-out split.
const heldOutEvery = 10

// chunkBytes is the approximate size of a text chunk.
const chunkBytes = 2000

// source is one input of the corpus, recorded in the manifest.
type source struct {
	Name    string `json:"name"`
	License string `json:"license"`
	Bytes   int    `json:"bytes"`
	SHA256  string `json:"sha256"`
	Train   int    `json:"train_tokens"`
	HeldOut int    `json:"heldout_tokens"`
	Repeat  int    `json:"repeat,omitempty"`
}

func main() {
	goroot := flag.String("goroot", "/usr/local/go", "Go installation (Opticks, doc/, the standard packages)")
	out := flag.String("out", "", "directory to write train.u16, heldout.u16 and manifest.json into")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "corpus: -out is required")
		os.Exit(2)
	}
	if err := run(*goroot, *out); err != nil {
		fmt.Fprintln(os.Stderr, "corpus:", err)
		os.Exit(1)
	}
}

// writer accumulates the two splits.
type writer struct {
	tok            *tokenizer.Tokenizer
	eos            int32
	train, heldOut []int32
	chunk          int // distinct units seen so far, over all sources
	// split remembers the split of every unit by its ids, so that a repeated unit (multilingual.txt,
	// the handwritten conversations) always lands in the split of its first occurrence: nothing held
	// out is also trained on.
	split map[string]bool
}

// add appends one unit (a text chunk or a conversation's tokens) to the split its index picks.
func (w *writer) add(ids []int32, s *source) {
	key := string(u16(ids))
	held, ok := w.split[key]
	if !ok {
		w.chunk++
		held = w.chunk%heldOutEvery == 0
		w.split[key] = held
	}
	if held {
		w.heldOut = append(append(w.heldOut, ids...), w.eos)
		s.HeldOut += len(ids) + 1
		return
	}
	w.train = append(append(w.train, ids...), w.eos)
	s.Train += len(ids) + 1
}

// text adds a document cut into chunks at line ends.
func (w *writer) text(doc string, s *source) {
	for len(doc) > 0 {
		n := min(len(doc), chunkBytes)
		if n < len(doc) {
			if i := strings.IndexByte(doc[n:], '\n'); i >= 0 {
				n += i + 1
			} else {
				n = len(doc)
			}
		}
		w.add(w.tok.Encode(doc[:n]), s)
		doc = doc[n:]
	}
}

func run(goroot, out string) error {
	tok, err := tokenizer.Builtin(NumBPE)
	if err != nil {
		return err
	}
	eos, ok := tok.SpecialID("[EOS]")
	if !ok {
		return fmt.Errorf("the vocabulary has no [EOS]")
	}
	w := &writer{tok: tok, eos: eos, split: map[string]bool{}}
	var sources []source
	addFiles := func(name, license string, paths []string, repeat int) error {
		s := source{Name: name, License: license, Repeat: repeat}
		h := sha256.New()
		var docs []string
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(goroot, p)
			if err != nil || strings.HasPrefix(rel, "..") {
				rel = filepath.Base(p)
			}
			fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(rel), len(b))
			h.Write(b)
			s.Bytes += len(b)
			docs = append(docs, string(b))
		}
		s.SHA256 = fmt.Sprintf("%x", h.Sum(nil))
		for range max(repeat, 1) {
			for _, d := range docs {
				w.text(d, &s)
			}
		}
		sources = append(sources, s)
		return nil
	}
	if err := addFiles("Go tree src/testdata/Isaac.Newton-Opticks.txt", "public domain",
		[]string{filepath.Join(goroot, "src/testdata/Isaac.Newton-Opticks.txt")}, 0); err != nil {
		return err
	}
	docs, err := filesUnder(filepath.Join(goroot, "doc"), func(p string) bool {
		return strings.HasSuffix(p, ".md") || strings.HasSuffix(p, ".html")
	})
	if err != nil {
		return err
	}
	if err := addFiles("Go tree doc/ (*.md, *.html)", "BSD-3-Clause", docs, 0); err != nil {
		return err
	}
	var gofiles []string
	for _, pkg := range goPackages {
		fs, err := filesIn(filepath.Join(goroot, "src", pkg), func(p string) bool {
			return strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go")
		})
		if err != nil {
			return err
		}
		gofiles = append(gofiles, fs...)
	}
	if err := addFiles("Go tree src/{"+strings.Join(goPackages, ",")+"}/*.go (not tests)", "BSD-3-Clause", gofiles, 0); err != nil {
		return err
	}
	ml := filepath.Join("replay/tokenizer/internal/trainvocab/multilingual.txt")
	if err := addFilesRel(addFiles, "replay/tokenizer/internal/trainvocab/multilingual.txt", "this repository's license (written for the project)", ml, 4); err != nil {
		return err
	}
	convs, s, err := conversations()
	if err != nil {
		return err
	}
	for _, c := range convs {
		toks, err := tok.EncodeConversation(c)
		if err != nil {
			return fmt.Errorf("conversation %s: %w", c.ID, err)
		}
		w.add(tokenizer.IDs(toks), &s)
	}
	sources = append(sources, s)

	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		ids  []int32
	}{{"train.u16", w.train}, {"heldout.u16", w.heldOut}} {
		b := make([]byte, 2*len(f.ids))
		for i, id := range f.ids {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(id))
		}
		if err := os.WriteFile(filepath.Join(out, f.name), b, 0o644); err != nil {
			return err
		}
	}
	manifest := map[string]any{
		"tokenizer":      fmt.Sprintf("tokenizer.Builtin(%d): %d ids (the first %d learned tokens + 256 specials)", NumBPE, NumBPE+256, NumBPE),
		"split":          fmt.Sprintf("chunks of about %d bytes cut at line ends (conversations whole), each followed by [EOS] (%d); distinct unit i (1-based, over all sources) is held out when i %% %d == 0; a repeated unit keeps the split of its first occurrence", chunkBytes, eos, heldOutEvery),
		"sources":        sources,
		"train_tokens":   len(w.train),
		"heldout_tokens": len(w.heldOut),
		"train_sha256":   fmt.Sprintf("%x", sha256.Sum256(u16(w.train))),
		"heldout_sha256": fmt.Sprintf("%x", sha256.Sum256(u16(w.heldOut))),
	}
	b, err := json.MarshalIndent(manifest, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "manifest.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("train %d tokens, held out %d tokens, %d conversations\n", len(w.train), len(w.heldOut), len(convs))
	return nil
}

// addFilesRel adds one repository file (a path relative to the working directory).
func addFilesRel(add func(string, string, []string, int) error, name, license, path string, repeat int) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	return add(name, license, []string{abs}, repeat)
}

// u16 is ids as little-endian uint16 bytes.
func u16(ids []int32) []byte {
	b := make([]byte, 2*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(id))
	}
	return b
}

// filesIn lists the regular files directly in dir that keep accepts, sorted.
func filesIn(dir string, keep func(string) bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() && keep(e.Name()) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// filesUnder lists the regular files under dir (recursively) that keep accepts, sorted.
func filesUnder(dir string, keep func(string) bool) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && keep(p) {
			out = append(out, p)
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}
