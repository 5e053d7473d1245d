package tables

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
)

// TestIPCFileOnDisk checks that a .arrow file of WriteSet is an Arrow IPC file that arrow-go's own file
// reader opens (random access: the footer indexes every batch), that .arrows stays a stream, and that
// ReadFile still reads a .arrow file holding a stream (written before schema version 3).
func TestIPCFileOnDisk(t *testing.T) {
	mem := checkedAlloc(t)
	in := makeResults(3, 4, spec{seq: 1, tokens: 7, conv: true}, spec{seq: 2, tokens: 3})
	set, err := Build(in, Options{Allocator: mem, BatchRows: 4, Metadata: map[string]string{MetaEngine: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Release()
	dir := t.TempDir()
	if _, err := WriteSet(t.Context(), filepath.Join(dir, "r.arrow"), set); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteSet(t.Context(), filepath.Join(dir, "r.arrows"), set); err != nil {
		t.Fatal(err)
	}
	for _, tab := range set.Tables() {
		f, err := os.Open(filepath.Join(dir, "r."+tab.Name+".arrow"))
		if err != nil {
			t.Fatal(err)
		}
		fr, err := ipc.NewFileReader(f, ipc.WithAllocator(mem))
		if err != nil {
			t.Fatalf("%s: arrow-go's file reader: %v", tab.Name, err)
		}
		if !fr.Schema().Equal(tab.Schema) || TableName(fr.Schema()) != tab.Name || fr.NumRecords() != len(tab.Records) {
			t.Errorf("%s: file holds %d batches, schema %v", tab.Name, fr.NumRecords(), fr.Schema())
		}
		for i := fr.NumRecords() - 1; i >= 0; i-- { // random access, last batch first
			rec, err := fr.RecordBatchAt(i)
			if err != nil || !array.RecordEqual(rec, tab.Records[i]) {
				t.Errorf("%s: batch %d differs (%v)", tab.Name, i, err)
			}
			if rec != nil {
				rec.Release()
			}
		}
		fr.Close()
		f.Close()
		stream, err := os.ReadFile(filepath.Join(dir, "r."+tab.Name+".arrows"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(stream, []byte{0xff, 0xff, 0xff, 0xff}) {
			t.Errorf("%s: .arrows starts % x, want a stream's continuation marker", tab.Name, stream[:8])
		}
		// A stream under the .arrow name (this package's files before schema version 3) still reads.
		old := filepath.Join(dir, "old."+tab.Name+".arrow")
		if err := os.WriteFile(old, stream, 0o644); err != nil {
			t.Fatal(err)
		}
		back, err := ReadFile(old, mem)
		if err != nil || back.NumRows() != tab.NumRows() {
			t.Errorf("%s: a stream named .arrow: %v", tab.Name, err)
		}
		back.Release()
	}
	// An empty table is a file holding only its schema.
	empty, err := Build(nil, Options{Allocator: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Release()
	var buf bytes.Buffer
	if err := WriteTableIPCFile(&buf, empty.Tokens); err != nil {
		t.Fatal(err)
	}
	back, err := ReadIPCFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()), mem)
	if err != nil || back.NumRows() != 0 || !back.Schema.Equal(empty.Tokens.Schema) {
		t.Errorf("empty table read back: %v", err)
	}
	back.Release()
	_, err = ReadIPCFile(bytes.NewReader(buf.Bytes()[:buf.Len()-12]), int64(buf.Len()-12), mem)
	if err == nil || !strings.Contains(err.Error(), "tables: reading Arrow IPC file") {
		t.Errorf("a cut file: -want an error +got %v", err)
	}
}
