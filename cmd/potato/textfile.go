package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// The text of --text-file is read only up to the most bytes that --max-tokens tokens can cover: every
// byte of a text is part of exactly one token, and a token covers at most its tokenizer's longest
// piece, so a longer text has more tokens than the limit and is refused unread. Before, the whole file
// was read first: a 3 GB file took 45 s and 6.3 GB of memory to be refused, and one larger than the
// memory ended the process with no message.

// checkTextFile refuses, before the engine opens, a --text-file that cannot be read: one that does not
// exist, a directory. It returns the file's size (-1 for stdin, "-", which readTextFile reads later, and
// for a file that is not a regular one).
func checkTextFile(cmd, path string) (int64, error) {
	if path == "-" {
		return -1, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("%s: --text-file: %w", cmd, err)
	}
	defer f.Close()
	info, err := f.Stat()
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s: --text-file: %w", cmd, err)
	case info.IsDir():
		return 0, fmt.Errorf("%s: --text-file %s is a directory: give a file of text", cmd, path)
	case !info.Mode().IsRegular():
		return -1, nil
	}
	return info.Size(), nil
}

// maxTokenBytes is the most bytes of text one token of tok covers: its longest BPE token or special
// token name (EncodeText with specials allowed turns a name into one token).
func maxTokenBytes(tok *tokenizer.Tokenizer) int {
	n := 1
	for id := range tok.VocabSize() {
		if s, ok := tok.Token(int32(id)); ok {
			n = max(n, len(s))
		}
	}
	return n
}

// readTextFile reads the text of --text-file path (stdin for "-") for a limit of limit tokens of tok
// (flag names the limit in the error). A text too long to fit the limit is refused unread when the
// file's size says so, else after reading one byte past what the limit could cover.
func readTextFile(cmd, path string, stdin io.Reader, tok *tokenizer.Tokenizer, limit int, flag string) (string, error) {
	name := path
	r := stdin
	if path == "-" {
		name = "- (stdin)"
	} else {
		f, err := os.Open(path)
		if err != nil {
			return "", fmt.Errorf("%s: --text-file: %w", cmd, err)
		}
		defer f.Close()
		r = f
	}
	per := maxTokenBytes(tok)
	maxBytes := int64(math.MaxInt64 - 1) // a limit so large that no text can pass it
	if int64(limit) < maxBytes/int64(per) {
		maxBytes = int64(limit) * int64(per)
	}
	var b strings.Builder
	if f, ok := r.(*os.File); ok && path != "-" {
		if info, err := f.Stat(); err == nil && info.Mode().IsRegular() {
			if info.Size() > maxBytes {
				return "", fmt.Errorf("%s: --text-file %s has more than %d tokens: the limit is %d (%s): its %d bytes are more than %d tokens of at most %d bytes (the tokenizer's longest) can hold",
					cmd, name, limit, limit, flag, info.Size(), limit, per)
			}
			b.Grow(int(info.Size()))
		}
	}
	n, err := io.Copy(&b, io.LimitReader(r, maxBytes+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("%s: --text-file %s: %w", cmd, name, err)
	case n > maxBytes:
		return "", fmt.Errorf("%s: --text-file %s has more than %d tokens: the limit is %d (%s): it holds more than %d bytes, more than %d tokens of at most %d bytes (the tokenizer's longest) can hold",
			cmd, name, limit, limit, flag, maxBytes, limit, per)
	}
	return b.String(), nil
}
