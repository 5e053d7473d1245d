package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A conversation far past the limit (100,000 messages, 1.7 M tokens rendered whole) is refused after
// the limit's tokens, not rendered and tokenized whole first, by potato replay and potato tokenize alike,
// naming the file, the conversation's number and id, and the flag; past what is left of
// --max-request-tokens likewise.
func TestConversationFarPastLimit(t *testing.T) {
	model := tinyModel(t)
	dir := t.TempDir()
	line := func(id string, n int) string {
		return `{"id": "` + id + `", "thinking": false, "messages": [` +
			strings.TrimSuffix(strings.Repeat(`{"role": "user", "content": "hello there"}, `, n), ", ") + "]}\n"
	}
	long := filepath.Join(dir, "long.jsonl")
	os.WriteFile(long, []byte(line("short", 1)+line("long", 100_000)), 0o644)
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"replay, --max-tokens", []string{"replay", "--no-progress", "--chat", long, "--max-tokens", "100"},
			`replay: ` + long + `: conversation 2 (id "long") has more than 100 tokens: the limit is 100 (--max-tokens)`},
		{"replay, --max-wave-tokens", []string{"replay", "--no-progress", "--chat", long, "--max-wave-tokens", "100"},
			`replay: ` + long + `: conversation 2 (id "long") has more than 100 tokens: the limit is 100 (--max-wave-tokens)`},
		{"replay, --max-request-tokens", []string{"replay", "--no-progress", "--chat", long, "--max-tokens", "100", "--max-request-tokens", "110"},
			// conversation 1 has 17 tokens: 93 are left of the request's 110
			`replay: ` + long + `: conversations 1..2 have more than 110 tokens: the limit is 110 (--max-request-tokens)`},
		{"tokenize", []string{"tokenize", "--chat", long, "--max-tokens", "100"},
			`tokenize: ` + long + `: conversation 2 (id "long") has more than 100 tokens: the limit is 100 (--max-tokens)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout bytes.Buffer
			start := time.Now()
			args := append([]string{tt.args[0], "--model", model}, tt.args[1:]...)
			err := run(context.Background(), args, &stdout)
			if err == nil || err.Error() != tt.want {
				t.Errorf("error:\n-want %s\n+got  %v", tt.want, err)
			}
			if tt.args[0] == "replay" && stdout.Len() > 0 { // tokenize prints conversation 1 first, as it always has
				t.Errorf("printed before refusing:\n%.300s", stdout.String())
			}
			// 0.35 to 0.6 s here, mostly reading the 4.4 MB line (1.0 to 2.2 s when it was rendered whole first).
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("refused after %v", d)
			}
		})
	}
}
