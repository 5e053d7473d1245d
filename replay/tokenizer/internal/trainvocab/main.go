// Command trainvocab regenerates the learned vocabulary that package tokenizer embeds (data/learned.bpe)
// and its provenance record (data/learned.txt).
//
// The corpus is real text under clean licenses, read in a fixed order:
//   - the Go source tree at -goroot (BSD-3-Clause): every file under src/ and doc/ whose name ends in one
//     of corpusExts, is at most 1 MB and is valid UTF-8, in lexical path order: Go code and its comments,
//     assembly, C, Markdown and HTML documentation, test data (among it Newton's Opticks, public domain);
//   - multilingual.txt beside this file (written for this project, the repository's license), repeated
//     -weight times, for the scripts the Go tree lacks (Han, kana, Hangul, Cyrillic, Arabic, ...).
//
// Usage (from the repository root; 5 to 40 seconds on 2 cores, about 200 MB of memory):
//
//	go run ./replay/tokenizer/internal/trainvocab -goroot /usr/local/go -out replay/tokenizer/data
package main

import (
	"crypto/sha256"
	_ "embed"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

//go:embed multilingual.txt
var multilingual string

var corpusExts = []string{".go", ".s", ".c", ".h", ".md", ".html", ".txt", ".py", ".bash", ".sh"}

func main() {
	goroot := flag.String("goroot", "/usr/local/go", "Go installation whose src/ and doc/ are the corpus")
	out := flag.String("out", "replay/tokenizer/data", "directory to write learned.bpe and learned.txt into")
	size := flag.Int("size", tokenizer.LearnedSize, "tokens to learn, the 256 single bytes included")
	weight := flag.Int("weight", 20, "how many times multilingual.txt enters the corpus")
	flag.Parse()
	if err := run(*goroot, *out, *size, *weight); err != nil {
		fmt.Fprintln(os.Stderr, "trainvocab:", err)
		os.Exit(1)
	}
}

func run(goroot, out string, size, weight int) error {
	start := time.Now()
	version, err := os.ReadFile(filepath.Join(goroot, "VERSION"))
	if err != nil {
		return err
	}
	paths, err := corpusFiles(goroot)
	if err != nil {
		return err
	}
	docs := make([]string, 0, len(paths)+weight)
	h := sha256.New()
	total := 0
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(goroot, p))
		if err != nil {
			return err
		}
		if !utf8.Valid(b) {
			continue
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
		docs = append(docs, string(b))
		total += len(b)
	}
	goFiles := len(docs)
	goSum := fmt.Sprintf("%x", h.Sum(nil))
	for range weight {
		docs = append(docs, multilingual)
	}
	tokens, err := tokenizer.Train(slices.Values(docs), size)
	if err != nil {
		return err
	}
	if len(tokens) != size {
		return fmt.Errorf("the corpus supports only %d tokens, want %d", len(tokens), size)
	}
	compact, err := tokenizer.MarshalCompact(tokens)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "learned.bpe"), compact, 0o644); err != nil {
		return err
	}
	first := strings.SplitN(string(version), "\n", 2)[0]
	record := fmt.Sprintf(`Learned vocabulary embedded by package tokenizer (learned.bpe, compact format).
Regenerate: go run ./replay/tokenizer/internal/trainvocab -goroot GOROOT -out replay/tokenizer/data -size %d -weight %d

tokens:        %d (256 single bytes + %d merges), learned.bpe %d bytes, sha256 %x
go tree:       %s at GOROOT, %d files under src/ and doc/ with extensions %s (<= 1 MB, valid UTF-8),
               %d bytes, sha256 over (path NUL length NUL content)... %s
multilingual:  internal/trainvocab/multilingual.txt, %d bytes x %d, sha256 %x
licenses:      Go tree BSD-3-Clause (Newton's Opticks in src/testdata is public domain); multilingual.txt
               written for this project
`, size, weight, len(tokens), len(tokens)-256, len(compact), sha256.Sum256(compact),
		first, goFiles, strings.Join(corpusExts, " "), total, goSum,
		len(multilingual), weight, sha256.Sum256([]byte(multilingual)))
	if err := os.WriteFile(filepath.Join(out, "learned.txt"), []byte(record), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %d tokens (%d bytes) from %d files in %v\n", len(tokens), len(compact), goFiles, time.Since(start).Round(time.Millisecond))
	return nil
}

// corpusFiles lists the corpus files under goroot/src and goroot/doc, relative to goroot, in lexical order.
func corpusFiles(goroot string) ([]string, error) {
	var paths []string
	for _, dir := range []string{"doc", "src"} {
		err := filepath.WalkDir(filepath.Join(goroot, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.Type().IsRegular() || !slices.Contains(corpusExts, filepath.Ext(p)) {
				return nil
			}
			info, err := d.Info()
			if err != nil || info.Size() > 1<<20 {
				return err
			}
			rel, err := filepath.Rel(goroot, p)
			paths = append(paths, filepath.ToSlash(rel))
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return paths, nil
}
