package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/internal/filelock"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// A file system without room for the tables is refused before the compute, from the estimate's least
// file size; one that does not say how much room it has is not.
func TestCheckDisk(t *testing.T) {
	defer func(f func(string) (int64, bool)) { freeSpace = f }(freeSpace)
	est := tables.Estimate{Results: 100e6}
	for _, tt := range []struct {
		name   string
		free   int64
		known  bool
		format string
		refuse bool
	}{
		{"full", 0, true, tables.FormatIPC, true},
		{"under a megabyte, small tables", 512 << 10, true, tables.FormatParquet, true},
		{"arrow: under half the results", 40e6, true, tables.FormatIPC, true},
		{"arrow: room", 60e6, true, tables.FormatIPC, false},
		{"parquet: under an eighth", 10e6, true, tables.FormatParquet, true},
		{"parquet: room", 40e6, true, tables.FormatParquet, false},
		{"unknown", 0, false, tables.FormatIPC, false},
	} {
		freeSpace = func(string) (int64, bool) { return tt.free, tt.known }
		err := checkDisk("/some/dir/out.x", tt.format, est)
		if (err != nil) != tt.refuse {
			t.Errorf("%s: %v, want refused %v", tt.name, err, tt.refuse)
		}
		if err != nil && !strings.Contains(err.Error(), "/some/dir") {
			t.Errorf("%s: the error does not name the directory: %v", tt.name, err)
		}
	}
}

// The whole command: a full disk under --out stops the replay before its engine runs, and writes nothing.
func TestReplayRefusesFullDisk(t *testing.T) {
	defer func(f func(string) (int64, bool)) { freeSpace = f }(freeSpace)
	freeSpace = func(string) (int64, bool) { return 0, true }
	dir := t.TempDir()
	out := filepath.Join(dir, "r.parquet")
	var stdout strings.Builder
	err := runReplay(t.Context(), []string{"--text", "a short text", "--out", out, "--no-progress"}, &stdout)
	if err == nil || !strings.Contains(err.Error(), "nothing was computed") {
		t.Fatalf("-want a refusal before the compute +got %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused replay left %d entries in %s", len(entries), dir)
	}
}

// A second replay of an --out that another replay holds is refused before its engine runs; a replay
// leaves no lock file behind.
func TestReplayRefusesBusyOut(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "r.arrow")
	held, err := filelock.Acquire(filepath.Join(dir, ".r.arrow.lock"), 0o644, false)
	if err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	err = runReplay(t.Context(), []string{"--text", "a short text", "--out", out, "--no-progress"}, &stdout)
	if filelock.Supported && (err == nil || !strings.Contains(err.Error(), "being written by another replay")) {
		t.Fatalf("-want a refusal naming the other replay +got %v", err)
	}
	held.Unlock()
	os.Remove(filepath.Join(dir, ".r.arrow.lock"))
	if err := runReplay(t.Context(), []string{"--text", "a short text", "--out", out, "--no-progress"}, &stdout); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".lock") {
			t.Errorf("the replay left %s", e.Name())
		}
	}
}

// A replay stopped by Ctrl-C or SIGTERM says so and that --out is as it was, exits 1, and leaves nothing
// in --out's directory (no table, no lock file): before, its whole message was
// "potato: layer 0: lens: context canceled".
func TestReplayInterrupted(t *testing.T) {
	model := tinyModel(t)
	for _, out := range []string{"", "r.arrow"} {
		dir := t.TempDir()
		args := []string{"--model", model, "--text", "a short text", "--no-progress"}
		if out != "" {
			args = append(args, "--lens", "0", "--out", filepath.Join(dir, out))
		}
		ctx, cancel := context.WithCancelCause(t.Context())
		cancel(errors.New("interrupt signal received")) // what signal.NotifyContext's cause says
		var stdout strings.Builder
		err := runReplay(ctx, args, &stdout)
		want := "replay: stopped by interrupt signal received ("
		if out != "" {
			want = ": nothing of this run was written, and --out " + filepath.Join(dir, out) + " is as it was"
		}
		if err == nil || exitCode(err) != 1 || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), want) {
			t.Errorf("--out %q: -want …%s…, exit 1, context.Canceled +got %v", out, want, err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			t.Errorf("--out %q: the stopped replay left %s", out, entries[0].Name())
		}
	}
}
