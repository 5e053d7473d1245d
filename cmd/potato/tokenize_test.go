package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/datasets"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// potato tokenize refuses what it cannot show in bounded memory or what holds nothing, naming the flag or
// file, and prints nothing first.
func TestTokenizeRefusals(t *testing.T) {
	dir := t.TempDir()
	chats := filepath.Join(dir, "chats.jsonl")
	os.WriteFile(chats, datasets.ExamplesJSONL(), 0o644)
	empty := filepath.Join(dir, "empty.jsonl")
	os.WriteFile(empty, []byte("\n\n"), 0o644)
	big := filepath.Join(dir, "big.txt") // 3 MB of "word ": past the default --max-tokens (1,048,576)
	os.WriteFile(big, bytes.Repeat([]byte("word "), 3<<20/5), 0o644)
	wide := filepath.Join(dir, "wide.txt") // 64 KiB: more bytes than 3 tokens of the tokenizer can cover
	os.WriteFile(wide, bytes.Repeat([]byte("a"), 64<<10), 0o644)
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"text past --max-tokens", []string{"--text", "one two three four five", "--max-tokens", "3"},
			"the text has more than 3 tokens: the limit is 3 (--max-tokens)"},
		{"special text past --max-tokens", []string{"--text", "<|im_user|>one two three four", "--special", "--max-tokens", "3"},
			"the text has more than 3 tokens: the limit is 3 (--max-tokens)"},
		{"3 MB file", []string{"--text-file", big}, "the text has more than 1048576 tokens: the limit is 1048576 (--max-tokens)"},
		// refused by its size, unread (a file of many GB was read whole first, or ran out of memory)
		{"file past what --max-tokens can cover", []string{"--text-file", wide, "--max-tokens", "3"},
			"tokenize: --text-file " + wide + " has more than 3 tokens: the limit is 3 (--max-tokens): its 65536 bytes are more than"},
		{"file a directory", []string{"--text-file", dir}, "tokenize: --text-file " + dir + " is a directory"},
		{"conversation past --max-tokens", []string{"--chat", chats, "--max-tokens", "10"},
			`conversation 1 (id "greeting") has`},
		{"no conversations", []string{"--chat", empty, "--thinking", "off"}, "empty.jsonl holds no conversations"},
		{"zero limit", []string{"--text", "x", "--max-tokens", "0"}, "--max-tokens 0 must be positive"},
		{"thinking without chat", []string{"--text", "x", "--thinking", "on"}, "--thinking is for --chat"},
		{"argument", []string{"--text", "x", "extra"}, `unexpected argument "extra"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout bytes.Buffer
			err := run(context.Background(), append([]string{"tokenize"}, tt.args...), &stdout)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error: -want …%s… +got %v", tt.want, err)
			}
			if stdout.Len() > 0 {
				t.Errorf("printed before refusing:\n%.300s", stdout.String())
			}
		})
	}
}

// The conversation line the help shows runs as written, with no --thinking: it gives its mode (it gave
// a thinking_effort without one, which no --thinking could run: off refuses an effort, and the help did
// not say on).
func TestTokenizeUsage(t *testing.T) {
	var line string
	for _, l := range strings.Split(tokenizeUsage, "\n") {
		if strings.HasPrefix(l, `{"messages"`) {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no conversation line in the help:\n%s", tokenizeUsage)
	}
	chat := filepath.Join(t.TempDir(), "example.jsonl")
	if err := os.WriteFile(chat, []byte(line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"tokenize", "--chat", chat}, &stdout); err != nil {
		t.Fatalf("the help's conversation %s: %v", line, err)
	}
	if !strings.Contains(stdout.String(), "# conversation line:1: ") {
		t.Errorf("tokenize of the help's conversation:\n%.400s", stdout.String())
	}
}

// Rows past one aligned block print as the rows before them: every token once, in order.
func TestTokenizePrintsEveryRow(t *testing.T) {
	text := strings.Repeat("a b ", printRowsAligned) // more tokens than one block
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"tokenize", "--text", text}, &stdout); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if len(lines) < printRowsAligned+2 {
		t.Fatalf("%d lines, want more than one block of %d", len(lines), printRowsAligned)
	}
	for i, l := range lines[1:] {
		if f := strings.Fields(l); len(f) == 0 || f[0] != strconv.Itoa(i) {
			t.Fatalf("row %d reads %q", i, l)
		}
	}
}

// A model directory without tokenizer_config.json names that file when a replay needs the tokenizer,
// not tiktoken.model, which is there.
func TestReplayNamesMissingTokenizerFile(t *testing.T) {
	model := tinyModel(t)
	if err := os.Remove(filepath.Join(model, tokenizer.ConfigFile)); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"replay", "--model", model, "--no-progress", "--text", "hi"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "has no tokenizer") || !strings.Contains(err.Error(), tokenizer.ConfigFile) {
		t.Errorf("error %v: want it to name %s", err, tokenizer.ConfigFile)
	}
}
