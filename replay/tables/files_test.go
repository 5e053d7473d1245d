package tables

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTablePath pins the file layout of a Set.
func TestTablePath(t *testing.T) {
	tests := []struct{ path, name, want string }{
		{"results.arrow", TokensTable, "results.tokens.arrow"},
		{"out/run.3.parquet", LensTable, "out/run.3.lens.parquet"},
		{"/tmp/x.arrows", HiddenTable, "/tmp/x.hidden.arrows"},
	}
	for _, tt := range tests {
		if got := TablePath(tt.path, tt.name); got != tt.want {
			t.Errorf("TablePath(%q, %q): -want %q +got %q", tt.path, tt.name, tt.want, got)
		}
	}
	for path, want := range map[string]string{"a.arrow": FormatIPC, "a.ARROWS": FormatIPC, "a.parquet": FormatParquet, "a.csv": ""} {
		got, err := FormatOf(path)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("FormatOf(%q): -want %q +got %q, %v", path, want, got, err)
		}
	}
}

// TestWriteAtomic checks that a failed write leaves the old file as it was and no temporary file, and that
// a good write replaces it with a readable file.
func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "results.tokens.arrow")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := writeAtomic(path, func(w io.Writer) error {
		w.Write([]byte("half a table"))
		return boom
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), path) {
		t.Errorf("error: -want boom naming %s +got %v", path, err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("failed write changed the file to %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %d entries after a failed write, want 1", len(entries))
	}
	if err := writeAtomic(path, func(w io.Writer) error { _, err := w.Write([]byte("new")); return err }); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if b, _ := os.ReadFile(path); err != nil || string(b) != "new" || info.Mode().Perm() != 0o644 {
		t.Errorf("after a good write: content %q, mode %v, err %v", b, info.Mode(), err)
	}
	if err := writeAtomic(filepath.Join(dir, "missing", "x.arrow"), func(io.Writer) error { return nil }); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("write into a missing directory: -want ErrNotExist +got %v", err)
	}
}

// TestReadSetErrors checks ReadSet's refusals: no files, a file holding another table, an unknown format.
func TestReadSetErrors(t *testing.T) {
	mem := checkedAlloc(t)
	dir := t.TempDir()
	set, err := Build(handResults(), Options{Allocator: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Release()
	if _, err := ReadSet(filepath.Join(dir, "none.arrow"), mem); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no files: -want ErrNotExist +got %v", err)
	}
	if _, err := WriteSet(filepath.Join(dir, "r.csv"), set); err == nil {
		t.Error("WriteSet accepted a .csv path")
	}
	// The lens table written where the tokens table belongs.
	if err := WriteFile(filepath.Join(dir, "mixed.tokens.parquet"), set.Lens); err != nil {
		t.Fatal(err)
	}
	_, err = ReadSet(filepath.Join(dir, "mixed.parquet"), mem)
	if err == nil || !strings.Contains(err.Error(), `holds table "lens", want "tokens"`) {
		t.Errorf("mislabeled file: -want an error naming both tables +got %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.tokens.parquet"), []byte("not parquet"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = ReadSet(filepath.Join(dir, "bad.parquet"), mem)
	if err == nil || !strings.Contains(err.Error(), "bad.tokens.parquet") {
		t.Errorf("corrupt file: -want an error naming the file +got %v", err)
	}
}
