package tokenizer

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// The file names a model directory holds the tokenizer in.
const (
	ModelFile  = "tiktoken.model"
	ConfigFile = "tokenizer_config.json"
)

// NumSpecials is the number of special-token slots after the BPE tokens (K3: ids 163584..163839).
const NumSpecials = 256

// ErrFormat is wrapped by every error about a malformed tokenizer file.
var ErrFormat = errors.New("tokenizer: malformed file")

// Load reads tiktoken.model and tokenizer_config.json from a model directory.
func Load(dir string) (*Tokenizer, error) {
	modelPath := filepath.Join(dir, ModelFile)
	f, err := os.Open(modelPath)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	tokens, err := ReadTiktoken(f, modelPath)
	if err != nil {
		return nil, err
	}
	configPath := filepath.Join(dir, ConfigFile)
	data, err := os.ReadFile(configPath)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	cfg, err := ReadConfig(data, configPath, len(tokens))
	if err != nil {
		return nil, err
	}
	return New(tokens, cfg)
}

// ReadTiktoken parses a tiktoken.model file: one line per token, the base64 of its bytes, a space and
// its rank. It returns the tokens indexed by rank. Empty lines are skipped (as tiktoken does); anything
// else malformed is an error naming the file (name) and line: bad base64, a bad or duplicate rank, bytes
// that appear twice, ranks with a gap, and a missing single-byte token (byte-level BPE
// needs all 256).
func ReadTiktoken(r io.Reader, name string) ([]string, error) {
	type entry struct {
		tok        string
		rank, line int
	}
	var entries []entry
	seen := map[string]int{} // token bytes -> line
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		fields := bytes.Fields(sc.Bytes())
		if len(fields) == 0 {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: %s:%d: %s", ErrFormat, name, line, fmt.Sprintf(format, args...))
		}
		if len(fields) != 2 {
			return nil, bad("want \"BASE64 RANK\", got %d fields", len(fields))
		}
		tok, err := base64.StdEncoding.DecodeString(string(fields[0]))
		if err != nil {
			return nil, bad("bad base64 %q: %v", fields[0], err)
		}
		rank, err := strconv.ParseUint(string(fields[1]), 10, 31)
		if err != nil {
			return nil, bad("bad rank %q", fields[1])
		}
		if prev, ok := seen[string(tok)]; ok {
			return nil, bad("token %q already has a rank on line %d", tok, prev)
		}
		seen[string(tok)] = line
		entries = append(entries, entry{string(tok), int(rank), line})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: line %d: %w", name, line+1, err)
	}
	// The ranks must be exactly 0..n-1. Place those in range; any other rank implies a gap.
	n := len(entries)
	tokens := make([]string, n)
	lineOf := make([]int, n)
	for _, e := range entries {
		if e.rank >= n {
			continue
		}
		if lineOf[e.rank] != 0 {
			return nil, fmt.Errorf("%w: %s:%d: duplicate rank %d (also on line %d)", ErrFormat, name, e.line, e.rank, lineOf[e.rank])
		}
		tokens[e.rank], lineOf[e.rank] = e.tok, e.line
	}
	for rank, l := range lineOf {
		if l == 0 {
			where := "" // where the reader should look: the line of the rank before, and one past the end
			if rank > 0 {
				where = fmt.Sprintf("; rank %d is on line %d", rank-1, lineOf[rank-1])
			}
			for _, e := range entries {
				if e.rank >= n {
					where += fmt.Sprintf("; line %d gives rank %d, past the %d tokens the file holds", e.line, e.rank, n)
					break
				}
			}
			return nil, fmt.Errorf("%w: %s: ranks have a gap: no line gives rank %d%s", ErrFormat, name, rank, where)
		}
	}
	for b := range 256 {
		if _, ok := seen[string([]byte{byte(b)})]; !ok {
			return nil, fmt.Errorf("%w: %s: single-byte token 0x%02x is missing", ErrFormat, name, b)
		}
	}
	return tokens, nil
}

// New builds a tokenizer from BPE tokens indexed by rank (as ReadTiktoken returns them) and the special
// tokens of cfg. It checks what a hand-built vocabulary could get wrong: duplicate or empty tokens and
// missing single bytes.
func New(tokens []string, cfg *Config) (*Tokenizer, error) {
	if cfg == nil {
		return nil, fmt.Errorf("tokenizer: New: nil config")
	}
	if len(cfg.Specials) != NumSpecials {
		return nil, fmt.Errorf("tokenizer: New: config has %d special slots, want %d", len(cfg.Specials), NumSpecials)
	}
	t := &Tokenizer{
		tokens:     tokens,
		ranks:      make(map[string]int32, len(tokens)),
		specials:   cfg.Specials,
		specialIDs: make(map[string]int32, NumSpecials),
	}
	for id, tok := range tokens {
		if tok == "" {
			return nil, fmt.Errorf("tokenizer: New: token %d is empty", id)
		}
		if prev, ok := t.ranks[tok]; ok {
			return nil, fmt.Errorf("tokenizer: New: tokens %d and %d are both %q", prev, id, tok)
		}
		t.ranks[tok] = int32(id)
	}
	for b := range 256 {
		if _, ok := t.ranks[string([]byte{byte(b)})]; !ok {
			return nil, fmt.Errorf("tokenizer: New: single-byte token 0x%02x is missing", b)
		}
	}
	lengths := map[int]bool{}
	for i, name := range cfg.Specials {
		id := int32(len(tokens) + i)
		if prev, ok := t.specialIDs[name]; ok || name == "" {
			return nil, fmt.Errorf("tokenizer: New: special %d: name %q is empty or already used by %d", id, name, prev)
		}
		t.specialIDs[name] = id
		if !lengths[len(name)] {
			lengths[len(name)] = true
			t.specialLens = append(t.specialLens, len(name))
		}
		t.specialFirst[name[0]] = true
	}
	var err error
	for _, f := range []struct {
		name string
		dst  *int32
	}{{cfg.BOS, &t.bos}, {cfg.EOS, &t.eos}, {cfg.PAD, &t.pad}, {cfg.UNK, &t.unk}} {
		if *f.dst, err = t.namedID(f.name); err != nil {
			return nil, fmt.Errorf("tokenizer: New: %w", err)
		}
	}
	return t, nil
}

// namedID resolves a bos/eos/pad/unk name: -1 for none, else a special or BPE token of that text.
func (t *Tokenizer) namedID(name string) (int32, error) {
	if name == "" {
		return -1, nil
	}
	if id, ok := t.specialIDs[name]; ok {
		return id, nil
	}
	if id, ok := t.ranks[name]; ok {
		return id, nil
	}
	return -1, fmt.Errorf("token %q named in the config is not in the vocabulary", name)
}
