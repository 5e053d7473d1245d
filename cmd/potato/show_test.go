package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// potato show prints what a written table holds, read back by tables.ReadFile: its name, rows, every
// provenance key, its columns and its first rows; bad arguments are refused naming them.
func TestShow(t *testing.T) {
	model := tinyModel(t)
	out := filepath.Join(t.TempDir(), "r.arrow")
	if err := run(context.Background(), []string{"replay", "--model", model, "--tokens", "5,17,300,9", "--top-k", "2",
		"--lens", "1", "--no-progress", "--out", out}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	tokens := strings.TrimSuffix(out, ".arrow") + ".tokens.arrow"
	lens := strings.TrimSuffix(out, ".arrow") + ".lens.arrow"
	if err := run(context.Background(), []string{"show", "--rows", "2", tokens, lens}, &stdout); err != nil {
		t.Fatal(err)
	}
	got := stdout.String()
	// flags after the files are flags (--rows was read as a file)
	var after bytes.Buffer
	if err := run(context.Background(), []string{"show", tokens, lens, "--rows", "2"}, &after); err != nil || after.String() != got {
		t.Errorf("show FILES --rows 2: %v; -want +got:\n%s\n%s", err, got, after.String())
	}
	for _, want := range []string{tokens + ": table tokens, 4 rows", lens + ": table lens, 4 rows",
		"potato.result_set = ", "potato.request_hash = ", "potato.precision = bf16", "columns: seq_id int32, pos int32, token_id int32",
		"\n0       0    5         ", "... 2 more rows (--rows N)"} {
		if !strings.Contains(got, want) {
			t.Errorf("show lacks %q:\n%s", want, got)
		}
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "give one or more table files"},
		{[]string{filepath.Join(t.TempDir(), "none.tokens.arrow")}, "none.tokens.arrow"},
		{[]string{"--rows", "-1", tokens}, "--rows -1 is negative"},
		{[]string{"--width", "0", tokens}, "--width 0: a cell needs at least 4 characters"}, // it named --rows too
		{[]string{tokens, "--rows", "-1"}, "--rows -1 is negative"},
		{[]string{"r.csv"}, ".csv"},
		// a directory (a dataset job's) names the table files it holds and the command for the first
		{[]string{filepath.Dir(tokens)}, "is a directory: show takes table files; it holds 2: r.lens.arrow, r.tokens.arrow (potato show " + lens + ")"},
		{[]string{t.TempDir()}, "is a directory and holds no table files"},
	} {
		if err := run(context.Background(), append([]string{"show"}, tt.args...), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("show %v: %v, want …%s…", tt.args, err, tt.want)
		}
	}
}

// inspect given a result table points to show.
func TestInspectTableFile(t *testing.T) {
	model := tinyModel(t)
	out := filepath.Join(t.TempDir(), "r.parquet")
	if err := run(context.Background(), []string{"replay", "--model", model, "--tokens", "5,17", "--no-progress", "--out", out}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	tokens := strings.TrimSuffix(out, ".parquet") + ".tokens.parquet"
	err := run(context.Background(), []string{"inspect", tokens}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "is a result table, not a model directory: potato show "+tokens) {
		t.Errorf("inspect of a table: %v", err)
	}
}
