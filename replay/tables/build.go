package tables

import (
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/potato-k3/potato-k3/replay"
)

// DefaultBatchRows is the most rows a record batch holds when Options.BatchRows is 0: large enough that
// per-batch overhead vanishes, small enough that no builder grows past a few tens of MB for the token and
// lens tables.
const DefaultBatchRows = 64 << 10

// hiddenBatchBytes bounds the vector payload of one hidden batch (64 MiB): at K3's 7168 dims in float32 a
// batch then holds 2340 rows, so a 100k-token wave never needs one multi-GB builder.
const hiddenBatchBytes = 64 << 20

// ErrNotCaptured is returned by NewReader for a table none of the results has data for (the output was not
// requested).
var ErrNotCaptured = errors.New("tables: output not captured")

// Options control how results become records.
type Options struct {
	// HiddenFloat16 stores hidden vectors as float16 (IEEE half, round to nearest even, overflow to
	// infinity) instead of float32, halving the table.
	HiddenFloat16 bool
	// Metadata is added to every table's schema metadata: provenance such as MetaConfigHash, MetaEngine,
	// MetaPrecision and MetaBackend. It may not set MetaTable or MetaSchemaVersion.
	Metadata map[string]string
	// Allocator allocates the record buffers; nil means memory.DefaultAllocator.
	Allocator memory.Allocator
	// BatchRows is the most rows of one record batch; 0 means DefaultBatchRows. The hidden table also keeps
	// each batch's vectors under 64 MiB.
	BatchRows int
	// Piece names the token ids of the topk_tokens columns (tokens and lens tables): pass the tokenizer's
	// Piece (tokenizer.Tokenizer.Piece), the rendering of the token column's Result.Pieces, so that a
	// reader of the tables needs no tokenizer of its own. It is called once per top-k entry, with any id a
	// top-k list holds. nil leaves every topk_tokens list empty (an engine without a tokenizer).
	Piece func(id int32) string
}

// allocator returns the allocator to use.
func (o Options) allocator() memory.Allocator {
	if o.Allocator == nil {
		return memory.DefaultAllocator
	}
	return o.Allocator
}

// Table is one output table: its schema and its record batches in row order. Records may be empty (a
// table of zero rows still has a schema). The Table owns one reference to each record.
type Table struct {
	Name    string
	Schema  *arrow.Schema
	Records []arrow.RecordBatch
}

// NumRows is the total number of rows over all records.
func (t *Table) NumRows() int64 {
	var n int64
	for _, r := range t.Records {
		n += r.NumRows()
	}
	return n
}

// Reader returns a RecordReader over the table's records (for WriteIPCFrom, or any consumer of readers);
// the caller releases it. The table's records stay valid.
func (t *Table) Reader() (array.RecordReader, error) {
	rr, err := array.NewRecordReader(t.Schema, t.Records)
	if err != nil {
		return nil, fmt.Errorf("tables: %s: %w", t.Name, err)
	}
	return rr, nil
}

// ArrowTable returns the records as one arrow.Table (chunked columns), the shape notebook helpers and
// compute functions take; the caller releases it.
func (t *Table) ArrowTable() arrow.Table {
	return array.NewTableFromRecords(t.Schema, t.Records)
}

// Release releases the table's records. It is safe to call on a nil Table and more than once.
func (t *Table) Release() {
	if t == nil {
		return
	}
	for _, r := range t.Records {
		r.Release()
	}
	t.Records = nil
}

// Set holds every table of one replay. A table is nil when no result carries that output (it was not
// requested); Tokens is never nil after Build.
type Set struct {
	Tokens, Lens, Hidden, Router, AttnRes *Table
}

// Table returns the table called name (one of TableNames), or nil when the set does not hold it.
func (s *Set) Table(name string) *Table {
	if p := s.slot(name); p != nil {
		return *p
	}
	return nil
}

// Tables returns the non-nil tables in TableNames order.
func (s *Set) Tables() []*Table {
	var ts []*Table
	for _, name := range TableNames {
		if t := s.Table(name); t != nil {
			ts = append(ts, t)
		}
	}
	return ts
}

// Release releases every table. It is safe to call on a nil Set and more than once.
func (s *Set) Release() {
	if s == nil {
		return
	}
	for _, name := range TableNames {
		if p := s.slot(name); *p != nil {
			(*p).Release()
			*p = nil
		}
	}
}

// slot returns the field that holds table name, or nil for an unknown name.
func (s *Set) slot(name string) **Table {
	switch name {
	case TokensTable:
		return &s.Tokens
	case LensTable:
		return &s.Lens
	case HiddenTable:
		return &s.Hidden
	case RouterTable:
		return &s.Router
	case AttnResTable:
		return &s.AttnRes
	}
	return nil
}

// Captured returns the names of the tables the results carry data for, in TableNames order: tokens
// always, the others when at least one result has a capture of that kind.
func Captured(results []replay.Result) []string {
	names := []string{TokensTable}
	for _, name := range TableNames[1:] {
		for i := range results {
			if kindOf(name, Options{}).parts(&results[i]) > 0 {
				names = append(names, name)
				break
			}
		}
	}
	return names
}

// Build validates results (see Validate) and converts them to a Set, every table in batches of at most
// Options.BatchRows rows. Rows come in the order of results, then of each result's captures (Lens, Hidden,
// Router, Mixes as they appear), then of positions. The caller releases the Set. Build holds the whole
// Set in memory next to the results; to stream a large wave table by table use NewReader instead.
func Build(results []replay.Result, opts Options) (*Set, error) {
	if err := Validate(results); err != nil {
		return nil, err
	}
	set := &Set{}
	for _, name := range Captured(results) {
		t, err := buildTable(results, name, opts)
		if err != nil {
			set.Release()
			return nil, err
		}
		*set.slot(name) = t
	}
	return set, nil
}

// buildTable drains a reader over one table of already validated results into a Table.
func buildTable(results []replay.Result, name string, opts Options) (*Table, error) {
	rr, err := newReader(results, name, opts)
	if err != nil {
		return nil, err
	}
	defer rr.Release()
	t := &Table{Name: name, Schema: rr.Schema()}
	for rr.Next() {
		rec := rr.RecordBatch()
		rec.Retain()
		t.Records = append(t.Records, rec)
	}
	if err := rr.Err(); err != nil {
		t.Release()
		return nil, err
	}
	return t, nil
}
