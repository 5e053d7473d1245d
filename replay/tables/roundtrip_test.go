package tables

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// roundTrips are the ways a Set goes out and comes back; each returns the set read back.
var roundTrips = []struct {
	name string
	via  func(t *testing.T, s *Set, mem memory.Allocator) *Set
}{
	{"ipc stream in memory", func(t *testing.T, s *Set, mem memory.Allocator) *Set {
		back := &Set{}
		for _, tab := range s.Tables() {
			var buf bytes.Buffer
			if err := WriteIPC(&buf, tab.Records...); err != nil {
				t.Fatalf("WriteIPC %s: %v", tab.Name, err)
			}
			got, err := ReadIPC(&buf, mem)
			if err != nil {
				t.Fatalf("ReadIPC %s: %v", tab.Name, err)
			}
			*back.slot(got.Name) = got
		}
		return back
	}},
	{"parquet in memory", func(t *testing.T, s *Set, mem memory.Allocator) *Set {
		back := &Set{}
		for _, tab := range s.Tables() {
			var buf bytes.Buffer
			if err := WriteTableParquet(&buf, tab); err != nil {
				t.Fatalf("WriteTableParquet %s: %v", tab.Name, err)
			}
			got, err := ReadParquetFrom(bytes.NewReader(buf.Bytes()), mem)
			if err != nil {
				t.Fatalf("ReadParquetFrom %s: %v", tab.Name, err)
			}
			*back.slot(got.Name) = got
		}
		return back
	}},
	{"WriteSet .arrow", viaFiles("results.arrow")},
	{"WriteSet .arrows", viaFiles("results.arrows")},
	{"WriteSet .parquet", viaFiles("results.parquet")},
}

// viaFiles writes the set under a temporary directory as name and reads it back.
func viaFiles(name string) func(t *testing.T, s *Set, mem memory.Allocator) *Set {
	return func(t *testing.T, s *Set, mem memory.Allocator) *Set {
		dir := t.TempDir()
		path := filepath.Join(dir, name)
		written, err := WriteSet(t.Context(), path, s)
		if err != nil {
			t.Fatalf("WriteSet: %v", err)
		}
		if len(written) != len(s.Tables()) {
			t.Errorf("WriteSet wrote %v, want one file per table (%d)", written, len(s.Tables()))
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != len(written) {
			t.Errorf("directory holds %d entries, want the %d tables and no temporary files", len(entries), len(written))
		}
		back, err := ReadSet(path, mem)
		if err != nil {
			t.Fatalf("ReadSet: %v", err)
		}
		return back
	}
}

// TestRoundTrip writes every table of a Set in every format and reads it back: the results rebuilt from
// what was read must equal the input value for value (floats by bits), and every schema must come back
// with its exact types and metadata.
func TestRoundTrip(t *testing.T) {
	in := makeResults(1, 5,
		spec{seq: 7, tokens: 9, conv: true},
		spec{seq: 2, tokens: 1},  // a single position: no target at all
		spec{seq: 30, tokens: 0}, // no rows anywhere
		spec{seq: -4, tokens: 6, conv: true},
	)
	meta := map[string]string{MetaConfigHash: "abc123", MetaPrecision: "bf16", MetaBackend: "cpu", "note": "ünïcode"}
	for _, opts := range []Options{
		{Metadata: meta},
		{Metadata: meta, BatchRows: 4, Piece: handPiece}, // sequences and captures split across batches
	} {
		for _, rt := range roundTrips {
			t.Run(rt.name, func(t *testing.T) {
				mem := checkedAlloc(t)
				opts.Allocator = mem
				set, err := Build(in, opts)
				if err != nil {
					t.Fatalf("Build: %v", err)
				}
				defer set.Release()
				back := rt.via(t, set, mem)
				defer back.Release()
				for _, name := range TableNames {
					want, got := set.Table(name), back.Table(name)
					if got == nil {
						t.Fatalf("table %s did not come back", name)
					}
					if !want.Schema.Equal(got.Schema) || !want.Schema.Metadata().Equal(got.Schema.Metadata()) {
						t.Errorf("table %s schema:\n-want %v\n+got  %v", name, want.Schema, got.Schema)
					}
					for i, rec := range got.Records {
						if !rec.Schema().Equal(want.Schema) || !rec.Schema().Metadata().Equal(want.Schema.Metadata()) {
							t.Errorf("table %s batch %d schema:\n-want %v\n+got  %v", name, i, want.Schema, rec.Schema())
						}
					}
					if want.NumRows() != got.NumRows() {
						t.Errorf("table %s: -want %d rows +got %d", name, want.NumRows(), got.NumRows())
					}
				}
				results, err := FromSet(back)
				if err != nil {
					t.Fatalf("FromSet: %v", err)
				}
				if d := diff(expectAfterRoundTrip(in), results); d != "" {
					t.Errorf("results after the round trip differ: %s", d)
				}
				// The pieces are not read back, but Build names the ids again: the tables come back whole.
				again, err := Build(results, opts)
				if err != nil {
					t.Fatalf("Build of the results read back: %v", err)
				}
				defer again.Release()
				for _, name := range []string{TokensTable, LensTable} {
					a, b := set.Table(name).ArrowTable(), again.Table(name).ArrowTable()
					if !array.TableEqual(a, b) {
						t.Errorf("table %s built again from the results read back differs", name)
					}
					a.Release()
					b.Release()
				}
			})
		}
	}
}
