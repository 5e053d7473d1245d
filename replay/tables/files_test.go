package tables

import (
	"errors"
	"github.com/potato-k3/potato-k3/replay"
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
	for path, want := range map[string]string{"a.arrow": FormatIPC, "a.ARROWS": FormatIPCStream, "a.Arrow": FormatIPC, "a.parquet": FormatParquet, "a.csv": ""} {
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
	set := handSet(t, mem)
	if _, err := ReadSet(filepath.Join(dir, "none.arrow"), mem); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no files: -want ErrNotExist +got %v", err)
	}
	if _, err := WriteSet(t.Context(), filepath.Join(dir, "r.csv"), set); err == nil {
		t.Error("WriteSet accepted a .csv path")
	}
	// The lens table written where the tokens table belongs.
	if err := WriteFile(filepath.Join(dir, "mixed.tokens.parquet"), set.Lens); err != nil {
		t.Fatal(err)
	}
	_, err := ReadSet(filepath.Join(dir, "mixed.parquet"), mem)
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

// TestWriteSetAtomic checks that a result set is published whole or not at all: a write that fails on
// its second table leaves the earlier run's files exactly as they were and no temporary entry; a good
// write of fewer tables removes the earlier run's other tables; ReadSet refuses tables of two runs.
func TestWriteSetAtomic(t *testing.T) {
	mem := checkedAlloc(t)
	build := func(id string, in []replay.Result) *Set {
		set, err := Build(in, Options{Allocator: mem, Metadata: map[string]string{MetaResultSet: id}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(set.Release)
		return set
	}
	all := makeResults(5, 4, spec{seq: 1, tokens: 5, conv: true})
	for _, ext := range []string{".arrow", ".arrows", ".parquet"} {
		t.Run(ext, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "res"+ext)
			first := build("aaaa", all)
			if _, err := WriteSet(t.Context(), path, first); err != nil {
				t.Fatal(err)
			}
			before := dirContents(t, dir)
			// The second run's lens table does not write (its records are another table's), as a full disk
			// fails a write after the tokens table is done.
			broken := build("bbbb", all)
			lens := broken.Lens
			broken.Lens = &Table{Name: LensTable, Schema: lens.Schema, Records: broken.Tokens.Records}
			_, err := WriteSet(t.Context(), path, broken)
			broken.Lens = lens
			if err == nil || !strings.Contains(err.Error(), "table lens") || !strings.Contains(err.Error(), "nothing was replaced") {
				t.Errorf("error: -want naming table lens and nothing replaced +got %v", err)
			}
			if d := cmpContents(before, dirContents(t, dir)); d != "" {
				t.Errorf("a failed write changed the directory: %s", d)
			}
			back, err := ReadSet(path, mem)
			if err != nil {
				t.Fatal(err)
			}
			if got := metaValue(back.Tokens.Schema, MetaResultSet); got != "aaaa" {
				t.Errorf("tokens after a failed write: result set -want aaaa +got %s", got)
			}
			back.Release()
			// A good run that captured only tokens: the earlier lens, hidden... files go.
			only := build("cccc", makeResults(6, 4, spec{seq: 1, tokens: 3}))
			for _, p := range []**Table{&only.Lens, &only.Hidden, &only.Router, &only.AttnRes} {
				(*p).Release()
				*p = nil
			}
			written, err := WriteSet(t.Context(), path, only)
			if err != nil || len(written) != 1 {
				t.Fatalf("WriteSet of tokens only: %v, %v", written, err)
			}
			if names := dirContents(t, dir); len(names) != 1 {
				t.Errorf("after a tokens-only run the directory holds %v, want the tokens table alone", names)
			}
			// Tables of two runs side by side (copied by hand) are refused.
			if _, err := WriteSet(t.Context(), filepath.Join(dir, "other"+ext), first); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(TablePath(filepath.Join(dir, "other"+ext), LensTable), TablePath(path, LensTable)); err != nil {
				t.Fatal(err)
			}
			_, err = ReadSet(path, mem)
			if err == nil || !strings.Contains(err.Error(), "tables of different runs") {
				t.Errorf("mixed runs: -want refused +got %v", err)
			}
		})
	}
}

// dirContents maps every entry of dir to its bytes.
func dirContents(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		out[e.Name()] = string(b)
	}
	return out
}

// cmpContents describes how two dirContents differ, or returns "".
func cmpContents(want, got map[string]string) string {
	var d []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			d = append(d, "-"+k)
		} else if g != v {
			d = append(d, "~"+k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d = append(d, "+"+k)
		}
	}
	return strings.Join(d, " ")
}

// A table file that is not of its format, or was cut short, is refused naming the file and saying which
// (by its first and last bytes), where the readers said "arrow/ipc: not an Arrow file" of a .arrow file
// cut short, "reading Arrow IPC stream: … unexpected EOF" of a JSONL file named .arrow and "file is
// smaller than indicated metadata size" of a file that is not Parquet. A .arrows file that holds an IPC
// file is read as one.
func TestReadFileNotOfItsFormat(t *testing.T) {
	mem := checkedAlloc(t)
	dir := t.TempDir()
	set := handSet(t, mem)
	good := map[string][]byte{}
	for _, ext := range []string{".arrow", ".arrows", ".parquet"} {
		if _, err := WriteSet(t.Context(), filepath.Join(dir, "r"+ext), set); err != nil {
			t.Fatal(err)
		}
		good[ext], _ = os.ReadFile(filepath.Join(dir, "r.tokens"+ext))
	}
	jsonl := []byte(`{"messages":[{"role":"user","content":"hi"}]}` + "\n")
	for _, tt := range []struct {
		name, ext string
		data      []byte
		want      string // after the path
	}{
		{"JSONL named .arrow", ".arrow", jsonl, ` is not an Arrow IPC file or stream: it starts with "{\"messages\":[{\"r"`},
		{"JSONL named .arrows", ".arrows", jsonl, " is not an Arrow IPC file or stream"},
		{"IPC file cut in half", ".arrow", good[".arrow"][:len(good[".arrow"])/2], ": an Arrow IPC file cut short ("},
		{"IPC file less its last byte", ".arrow", good[".arrow"][:len(good[".arrow"])-1], ": an Arrow IPC file cut short ("},
		{"IPC stream cut in a batch", ".arrows", good[".arrows"][:len(good[".arrows"])*3/4], ": an Arrow IPC stream cut short ("},
		{"Arrow file named .parquet", ".parquet", good[".arrow"], ` is not a Parquet file: it does not start with PAR1 (it starts with "ARROW1`},
		{"Parquet cut in half", ".parquet", good[".parquet"][:len(good[".parquet"])/2], ": a Parquet file cut short ("},
		{"Parquet named .arrow", ".arrow", good[".parquet"], ` is not an Arrow IPC file or stream: it starts with "PAR1`},
		{"empty", ".arrow", nil, " is empty (0 bytes), not a table file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x"+tt.ext)
			os.WriteFile(path, tt.data, 0o644)
			tb, err := ReadFile(path, mem)
			if err == nil {
				tb.Release()
			}
			if want := path + tt.want; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("-want …%s… +got %v", want, err)
			}
		})
	}
	if _, err := ReadFile(t.TempDir()+"/d.arrow", mem); err == nil {
		t.Errorf("a missing file was read")
	}
	sub := filepath.Join(dir, "d.arrow")
	os.Mkdir(sub, 0o755)
	if _, err := ReadFile(sub, mem); err == nil || !strings.Contains(err.Error(), sub+" is a directory, not a table file") {
		t.Errorf("a directory: -want …is a directory… +got %v", err)
	}
	misnamed := filepath.Join(dir, "file.arrows") // an IPC file named as a stream: read, not refused
	os.WriteFile(misnamed, good[".arrow"], 0o644)
	tb, err := ReadFile(misnamed, mem)
	if err != nil {
		t.Fatalf("an IPC file named .arrows: %v", err)
	}
	if tb.NumRows() != set.Tokens.NumRows() {
		t.Errorf("an IPC file named .arrows: -want %d rows +got %d", set.Tokens.NumRows(), tb.NumRows())
	}
	tb.Release()
}
