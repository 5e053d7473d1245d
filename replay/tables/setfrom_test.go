package tables

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// failing is a RecordReader that yields nothing and then fails with err; schema may be nil, as a reader's
// is when it failed before it knew it (a merge whose first part does not read).
type failing struct {
	schema *arrow.Schema
	err    error
}

func (f *failing) Retain()                        {}
func (f *failing) Release()                       {}
func (f *failing) Schema() *arrow.Schema          { return f.schema }
func (f *failing) Next() bool                     { return false }
func (f *failing) RecordBatch() arrow.RecordBatch { return nil }
func (f *failing) Record() arrow.RecordBatch      { return nil }
func (f *failing) Err() error                     { return f.err }

var _ array.RecordReader = (*failing)(nil)

// TestWritersNilSchema checks that every streaming writer given a reader without a schema returns an
// error carrying the reader's, instead of panicking, and that TableName tolerates a nil schema.
func TestWritersNilSchema(t *testing.T) {
	if got := TableName(nil); got != "" {
		t.Errorf("TableName(nil): -want \"\" +got %q", got)
	}
	boom := errors.New("part-00003.tokens.parquet: no such file")
	for _, tt := range []struct {
		name  string
		write func(io.Writer, array.RecordReader) error
	}{
		{"parquet", WriteParquetFrom},
		{"ipc stream", WriteIPCFrom},
		{"ipc file", WriteIPCFileFrom},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, rerr := range []error{boom, nil} {
				err := tt.write(io.Discard, &failing{err: rerr})
				if err == nil || !strings.Contains(err.Error(), "no schema") {
					t.Errorf("reader error %v: -want an error saying no schema +got %v", rerr, err)
				}
				if rerr != nil && !errors.Is(err, rerr) {
					t.Errorf("-want the reader's error wrapped +got %v", err)
				}
			}
		})
	}
}

// TestWriteSetFrom checks the set writers against WriteFile: the same bytes from readers (WriteSetFrom)
// and from held tables (WriteSet, which writes them through readers too) as WriteFile's of each table; a reader that fails on the second table leaves the earlier set as it was and no temporary
// entry; fewer tables remove the earlier set's others; names outside TableNames, given twice, or not the
// reader's own table are refused.
func TestWriteSetFrom(t *testing.T) {
	mem := checkedAlloc(t)
	set, err := Build(makeResults(7, 4, spec{seq: 1, tokens: 5, conv: true}, spec{seq: 2, tokens: 3}),
		Options{Allocator: mem, Metadata: map[string]string{MetaResultSet: "aaaa"}})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Release()
	sources := func(t *testing.T, ts ...*Table) []TableSource {
		var srcs []TableSource
		for _, tb := range ts {
			rr, err := tb.Reader()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(rr.Release)
			srcs = append(srcs, TableSource{Name: tb.Name, Reader: rr})
		}
		return srcs
	}
	for _, ext := range []string{".arrow", ".arrows", ".parquet"} {
		t.Run(ext, func(t *testing.T) {
			dir := t.TempDir()
			want, held, path := filepath.Join(dir, "want"+ext), filepath.Join(dir, "held"+ext), filepath.Join(dir, "got"+ext)
			for _, tb := range set.Tables() {
				if err := WriteFile(TablePath(want, tb.Name), tb); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := WriteSet(t.Context(), held, set); err != nil {
				t.Fatal(err)
			}
			written, err := WriteSetFrom(t.Context(), path, sources(t, set.Tables()...))
			if err != nil {
				t.Fatal(err)
			}
			if len(written) != len(set.Tables()) {
				t.Errorf("wrote %v, want %d tables", written, len(set.Tables()))
			}
			for _, tb := range set.Tables() {
				a, _ := os.ReadFile(TablePath(want, tb.Name))
				for _, got := range []struct{ writer, path string }{{"WriteSet", held}, {"WriteSetFrom", path}} {
					b, err := os.ReadFile(TablePath(got.path, tb.Name))
					if err != nil || !bytes.Equal(a, b) {
						t.Errorf("%s: %s's file differs from WriteFile's (%v)", tb.Name, got.writer, err)
					}
				}
			}
			os.RemoveAll(dir)
			os.Mkdir(dir, 0o755)
			if _, err := WriteSet(t.Context(), path, set); err != nil {
				t.Fatal(err)
			}
			before := dirContents(t, dir)

			boom := errors.New("boom")
			srcs := sources(t, set.Tokens)
			srcs = append(srcs, TableSource{Name: LensTable, Reader: &failing{schema: set.Lens.Schema, err: boom}})
			_, err = WriteSetFrom(t.Context(), path, srcs)
			if !errors.Is(err, boom) || !strings.Contains(err.Error(), "table lens") || !strings.Contains(err.Error(), "nothing was replaced") {
				t.Errorf("error: -want boom, table lens, nothing replaced +got %v", err)
			}
			if d := cmpContents(before, dirContents(t, dir)); d != "" {
				t.Errorf("a failed write changed the directory: %s", d)
			}

			for _, bad := range []struct {
				srcs []TableSource
				want string
			}{
				{[]TableSource{{Name: "extra", Reader: &failing{}}}, "unknown table"},
				{append(sources(t, set.Tokens), sources(t, set.Tokens)...), "given twice"},
				{[]TableSource{{Name: LensTable, Reader: sources(t, set.Tokens)[0].Reader}}, `holds table "tokens"`},
			} {
				if _, err := WriteSetFrom(t.Context(), path, bad.srcs); err == nil || !strings.Contains(err.Error(), bad.want) {
					t.Errorf("-want an error saying %q +got %v", bad.want, err)
				}
				if d := cmpContents(before, dirContents(t, dir)); d != "" {
					t.Errorf("a refused write changed the directory: %s", d)
				}
			}

			if _, err := WriteSetFrom(t.Context(), path, sources(t, set.Tokens)); err != nil {
				t.Fatal(err)
			}
			if names := dirContents(t, dir); len(names) != 1 {
				t.Errorf("after a tokens-only set the directory holds %d entries, want the tokens table alone", len(names))
			}
		})
	}
}
