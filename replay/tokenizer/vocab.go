package tokenizer

import (
	"bufio"
	_ "embed"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// The learned vocabulary behind every synthetic checkpoint: LearnedSize tokens that Train learned from a
// fixed corpus, stored in the compact format (data/learned.bpe, 244 KB). data/learned.txt records
// the corpus (the Go 1.26.8 source tree, BSD, plus internal/trainvocab/multilingual.txt written for this
// project) with its checksum. Regenerate both with
//
//	go run ./replay/tokenizer/internal/trainvocab -goroot /usr/local/go -out replay/tokenizer/data
//
//go:generate go run ./internal/trainvocab -out data
//go:embed data/learned.bpe
var learnedCompact []byte

// LearnedSize is the number of tokens in the embedded learned vocabulary (256 bytes + 65,280 merges).
// Larger vocabularies are padded (see Pad).
const LearnedSize = 65536

var learned = sync.OnceValues(func() ([]string, error) {
	tokens, err := UnmarshalCompact(learnedCompact)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: embedded vocabulary: %w", err)
	}
	return tokens, nil
})

// BuiltinTokens returns a vocabulary of exactly numBPE byte-level BPE tokens in rank order: the first
// numBPE tokens of the embedded learned vocabulary, padded by Pad beyond LearnedSize (the full K3 shape,
// 163,584, is 65,536 learned and 98,048 padding tokens). It is deterministic and needs no file or network.
// The returned slice is the caller's.
func BuiltinTokens(numBPE int) ([]string, error) {
	if numBPE < 256 {
		return nil, fmt.Errorf("tokenizer: builtin vocabulary: %d tokens is fewer than the 256 single bytes", numBPE)
	}
	tokens, err := learned()
	if err != nil {
		return nil, err
	}
	if numBPE <= len(tokens) {
		return append([]string(nil), tokens[:numBPE]...), nil
	}
	return Pad(tokens, numBPE)
}

// Builtin returns a Tokenizer over BuiltinTokens(numBPE) with the K3 special tokens after them.
func Builtin(numBPE int) (*Tokenizer, error) {
	tokens, err := BuiltinTokens(numBPE)
	if err != nil {
		return nil, err
	}
	return New(tokens, K3Config(numBPE))
}

// WriteModelFiles writes tiktoken.model and tokenizer_config.json for a synthetic checkpoint into dir:
// BuiltinTokens(numBPE) and the K3 special tokens at the K3 offsets after them (ids numBPE..numBPE+255,
// so the model's vocab_size is numBPE+256). The files are byte-identical on every run.
func WriteModelFiles(dir string, numBPE int) error {
	tokens, err := BuiltinTokens(numBPE)
	if err != nil {
		return err
	}
	return WriteFiles(dir, tokens, K3Config(numBPE))
}

// WriteFiles writes tokens as tiktoken.model and cfg as tokenizer_config.json into dir.
func WriteFiles(dir string, tokens []string, cfg *Config) error {
	conf, err := cfg.JSON(len(tokens))
	if err != nil {
		return err
	}
	path := filepath.Join(dir, ModelFile)
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	if err := WriteTiktoken(f, tokens); err != nil {
		f.Close()
		return fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), conf, 0o644); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	return nil
}

// WriteTiktoken writes tokens in tiktoken.model format: one line per token in rank order, the standard
// base64 of its bytes, a space, its rank.
func WriteTiktoken(w io.Writer, tokens []string) error {
	bw := bufio.NewWriter(w)
	var line []byte
	for rank, tok := range tokens {
		line = base64.StdEncoding.AppendEncode(line[:0], []byte(tok))
		line = append(line, ' ')
		line = strconv.AppendInt(line, int64(rank), 10)
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			return err
		}
	}
	return bw.Flush()
}
