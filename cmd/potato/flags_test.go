package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
)

// Help asked for goes to stdout (potato help replay | less), for every command; a mistake in the
// command line is a usage error: exit status 2, printed once with a pointer to the help.
func TestHelpAndUsageErrors(t *testing.T) {
	for name := range commands {
		var out bytes.Buffer
		err := run(context.Background(), []string{"help", name}, &out)
		if (err != nil && !errors.Is(err, flag.ErrHelp)) || exitCode(err) != 0 || !strings.HasPrefix(out.String(), "usage: potato "+name) {
			t.Errorf("potato help %s: %v, exit %d, stdout %.80q; want the usage on stdout, exit 0", name, err, exitCode(err), out.String())
		}
		if strings.Contains(out.String(), "\n  -") && !strings.Contains(out.String(), "\n  --") {
			t.Errorf("potato help %s names its flags with one dash:\n%s", name, out.String())
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"help"}, &out); err != nil || !strings.Contains(out.String(), "replay") {
		t.Errorf("potato help: %v, %q", err, out.String())
	}
	for _, tt := range []struct {
		args []string
		want string // the error
		hint string // what report prints after it
	}{
		{nil, "no command given", "usage: potato COMMAND"},
		{[]string{"bogus"}, `unknown command "bogus"`, "run potato help for the commands"},
		{[]string{"help", "bogus"}, `help: unknown command "bogus"`, "run potato help for the commands"},
		{[]string{"replay", "--device-memory", "24g"}, `replay: invalid value "24g" for flag --device-memory: "24g" is not a size`, "run potato help replay for its usage and flags"},
		{[]string{"replay", "-bogus"}, "replay: flag provided but not defined: --bogus", "run potato help replay"},
		{[]string{"tokenize", "--text"}, "tokenize: flag needs an argument: --text", "run potato help tokenize"},
		{[]string{"demo", "extra"}, `demo: unexpected argument "extra"`, "run potato help demo"},
		{[]string{"synth"}, "synth: --out DIR is required", "run potato help synth"},
		{[]string{"replay", "--chat", "/nonexistent.jsonl", "--thinking", "maybe"}, `replay: --thinking "maybe": want on or off`, "run potato help replay"},
		{[]string{"tokenize", "--chat", "/nonexistent.jsonl", "--thinking", "yes"}, `tokenize: --thinking "yes": want on or off`, "run potato help tokenize"},
		{[]string{"notebook", "install", "--bogus"}, "notebook install: flag provided but not defined: --bogus", "run potato help notebook"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tt.args, &stdout)
		if err == nil || !strings.Contains(err.Error(), tt.want) || exitCode(err) != 2 {
			t.Errorf("potato %q: -want …%s…, exit 2 +got %v, exit %d", tt.args, tt.want, err, exitCode(err))
			continue
		}
		report(&stderr, err)
		if got := stderr.String(); strings.Count(got, tt.want) != 1 || !strings.Contains(got, tt.hint) || strings.Contains(got, "--max-tokens") {
			t.Errorf("potato %q: stderr, want the error once and …%s…, not the flags:\n%s", tt.args, tt.hint, got)
		}
		if stdout.Len() > 0 {
			t.Errorf("potato %q printed on stdout: %q", tt.args, stdout.String())
		}
	}
	if c := exitCode(errors.New("boom")); c != 1 {
		t.Errorf("a failure: exit %d, want 1", c)
	}
}

// twoDashes names a flag as the docs do, and leaves the value it quotes as given.
func TestTwoDashes(t *testing.T) {
	for _, tt := range [][2]string{
		{`invalid value "24g" for flag -device-memory: "24g" is not a size`, `invalid value "24g" for flag --device-memory: "24g" is not a size`},
		{`invalid value "x for flag -y" for flag -z: bad`, `invalid value "x for flag -y" for flag --z: bad`},
		{`invalid boolean value "maybe" for -router: parse error`, `invalid boolean value "maybe" for --router: parse error`},
		{"flag provided but not defined: -bogus", "flag provided but not defined: --bogus"},
		{"flag needs an argument: -text", "flag needs an argument: --text"},
		{"bad flag syntax: ---x", "bad flag syntax: ---x"},
	} {
		if got := twoDashes(tt[0]); got != tt[1] {
			t.Errorf("twoDashes(%q):\n-want %q\n+got  %q", tt[0], tt[1], got)
		}
	}
}

// Flags may follow the arguments of show, inspect and merge; after "--" every word is an argument.
func TestParseInterspersed(t *testing.T) {
	for _, tt := range []struct {
		args []string
		pos  []string
		rows int
	}{
		{[]string{"a.arrow", "--rows", "1"}, []string{"a.arrow"}, 1},
		{[]string{"--rows", "2", "a.arrow", "b.arrow", "-rows=3"}, []string{"a.arrow", "b.arrow"}, 3},
		{[]string{"a.arrow", "--", "--rows", "b"}, []string{"a.arrow", "--rows", "b"}, 10},
		{[]string{"-", "--rows", "0"}, []string{"-"}, 0},
		{nil, nil, 10},
	} {
		fs := newFlags("show", "usage: potato show\n")
		rows := fs.Int("rows", 10, "")
		pos, err := parseInterspersed(fs, tt.args, &bytes.Buffer{})
		if err != nil || !slices.Equal(pos, tt.pos) || *rows != tt.rows {
			t.Errorf("%q: -want %q, rows %d +got %q, rows %d, %v", tt.args, tt.pos, tt.rows, pos, *rows, err)
		}
	}
}
