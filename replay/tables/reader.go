package tables

import (
	"fmt"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/potato-k3/potato-k3/replay"
)

// kind is what differs between tables when walking results row by row: how many captures ("parts") of a
// result feed the table, and how to append rows [from, to) of one part. Every part has one row per token.
type kind struct {
	parts  func(r *replay.Result) int
	append func(b *array.RecordBuilder, r *replay.Result, part, from, to int)
}

// kindOf returns the walk of table name; name must be one of TableNames.
func kindOf(name string, opts Options) kind {
	switch name {
	case LensTable:
		return kind{func(r *replay.Result) int { return len(r.Lens) },
			func(b *array.RecordBuilder, r *replay.Result, part, from, to int) {
				appendLens(b, r, part, from, to, opts.Piece)
			}}
	case HiddenTable:
		app := appendHidden32
		if opts.HiddenFloat16 {
			app = appendHidden16
		}
		return kind{func(r *replay.Result) int { return len(r.Hidden) }, app}
	case RouterTable:
		return kind{func(r *replay.Result) int { return len(r.Router) }, appendRouter}
	case AttnResTable:
		return kind{func(r *replay.Result) int { return len(r.Mixes) }, appendAttnRes}
	}
	return kind{func(*replay.Result) int { return 1 },
		func(b *array.RecordBuilder, r *replay.Result, part, from, to int) {
			appendTokens(b, r, part, from, to, opts.Piece)
		}}
}

// NewReader validates results and returns a RecordReader that builds table name one batch at a time, so
// that a server can stream a wave's tables (WriteIPCFrom) holding only one batch of Arrow memory beside the
// results. Rows and batches are those of Build. results must not change while the reader is in use; the
// caller releases the reader. It returns an error wrapping ErrNotCaptured when no result carries the
// table's output.
func NewReader(results []replay.Result, name string, opts Options) (array.RecordReader, error) {
	if err := Validate(results); err != nil {
		return nil, err
	}
	return newReader(results, name, opts)
}

// newReader is NewReader on validated results.
func newReader(results []replay.Result, name string, opts Options) (*reader, error) {
	if tableIndex(name) < 0 {
		return nil, fmt.Errorf("tables: unknown table %q (want one of %v)", name, TableNames)
	}
	k := kindOf(name, opts)
	dim, captured := 0, name == TokensTable
	for i := range results {
		if k.parts(&results[i]) > 0 {
			captured = true
			if name == HiddenTable {
				dim = results[i].Hidden[0].Dim // Validate made every dim equal
			}
			break
		}
	}
	if !captured {
		return nil, fmt.Errorf("%w: %s", ErrNotCaptured, name)
	}
	schema, err := Schema(name, dim, opts.HiddenFloat16, opts.Metadata)
	if err != nil {
		return nil, err
	}
	maxRows := opts.BatchRows
	if maxRows <= 0 {
		maxRows = DefaultBatchRows
	}
	if name == HiddenTable {
		elem := 4
		if opts.HiddenFloat16 {
			elem = 2
		}
		maxRows = min(maxRows, max(1, hiddenBatchBytes/(dim*elem)))
	}
	rd := &reader{schema: schema, results: results, k: k, mem: opts.allocator(), maxRows: maxRows}
	rd.refs.Store(1)
	return rd, nil
}

// tableIndex is the index of name in TableNames, or -1.
func tableIndex(name string) int {
	for i, n := range TableNames {
		if n == name {
			return i
		}
	}
	return -1
}

// reader walks results with a cursor (result i, part, pos) and cuts a batch every maxRows rows.
type reader struct {
	refs    atomic.Int64
	schema  *arrow.Schema
	results []replay.Result
	k       kind
	mem     memory.Allocator
	maxRows int

	i, part, pos int // the next row to emit
	cur          arrow.RecordBatch
	err          error
}

// Retain adds a reference.
func (rd *reader) Retain() { rd.refs.Add(1) }

// Release drops a reference; the last one releases the current batch.
func (rd *reader) Release() {
	if rd.refs.Add(-1) == 0 && rd.cur != nil {
		rd.cur.Release()
		rd.cur = nil
	}
}

// Schema is the table's schema, metadata included.
func (rd *reader) Schema() *arrow.Schema { return rd.schema }

// RecordBatch is the batch Next made; it is valid until the next call to Next or Release.
func (rd *reader) RecordBatch() arrow.RecordBatch { return rd.cur }

// Record is RecordBatch, for the deprecated half of array.RecordReader.
func (rd *reader) Record() arrow.RecordBatch { return rd.cur }

// Err is the error that stopped Next, if any.
func (rd *reader) Err() error { return rd.err }

// Next builds the next batch; it returns false at the end or on error (see Err).
func (rd *reader) Next() (ok bool) {
	if rd.cur != nil {
		rd.cur.Release()
		rd.cur = nil
	}
	rd.skipEmpty()
	if rd.err != nil || rd.i >= len(rd.results) {
		return false
	}
	// Arrow builders panic on allocation failure; no panic leaves this package.
	defer func() {
		if p := recover(); p != nil {
			rd.err = fmt.Errorf("tables: building %s batch at sequence %d: %v", TableName(rd.schema), rd.results[rd.i].SeqID, p)
			ok = false
		}
	}()
	b := array.NewRecordBuilder(rd.mem, rd.schema)
	defer b.Release()
	rows := 0
	for rows < rd.maxRows && rd.i < len(rd.results) {
		r := &rd.results[rd.i]
		to := min(len(r.Tokens), rd.pos+rd.maxRows-rows)
		rd.k.append(b, r, rd.part, rd.pos, to)
		rows += to - rd.pos
		rd.pos = to
		rd.skipEmpty()
	}
	rd.cur = b.NewRecordBatch()
	return true
}

// skipEmpty moves the cursor past finished parts and results, so that it rests on a row or at the end.
func (rd *reader) skipEmpty() {
	for rd.i < len(rd.results) {
		r := &rd.results[rd.i]
		if rd.part < rd.k.parts(r) && rd.pos < len(r.Tokens) {
			return
		}
		rd.pos = 0
		rd.part++
		if rd.part >= rd.k.parts(r) || len(r.Tokens) == 0 {
			rd.part = 0
			rd.i++
		}
	}
}
