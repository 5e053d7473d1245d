package job

import (
	"context"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// MergeOptions tune Merge.
type MergeOptions struct {
	// Partial accepts directories whose job is not complete and shard sets with shards missing; by default
	// Merge refuses them, since the result would silently lack conversations.
	Partial bool
	// ResultSet, when set, is stamped on every merged table as its tables.MetaResultSet (replacing any the
	// parts carry), as `potato replay --out` stamps its sets (`potato merge` gives tables.NewSetID()), so
	// that ReadSet refuses the merged tables mixed with another run's; the job's Key is then stamped as
	// their tables.MetaRequestHash (a merged set answers no single request: the key hashes the dataset and
	// every setting that changes a row), so that every merged table carries all of tables.ProvenanceKeys.
	// Empty keeps the parts' metadata as it is, and the files then equal those of a single tables.Build
	// with the parts' options byte for byte.
	ResultSet string
	Log       func(string)
}

// MergeSummary is what Merge wrote.
type MergeSummary struct {
	Dirs, Parts, Conversations int
	Files                      []string
	Rows                       map[string]int64 // per table
}

// Merge writes the parts of the job directories dirs as one table set at out (FILE.parquet or
// FILE.arrow: FILE.tokens.parquet and so on, the layout of `potato replay --out`), whose rows are those a
// single replay of the whole dataset writes, in the same order (by seq_id) and cut into the same record
// batches: the files equal a single run's byte for byte but for the metadata (opts.ResultSet). The
// directories must hold one job (one key) and, unless opts.Partial, every shard of it, complete; no
// conversation may appear twice. Every part file the manifests name must be a plain name inside its
// directory and hold the rows its manifest records; a fault is refused, naming the file, before anything
// is written. The tables are written as one set (tables.WriteSetFrom): on any error nothing at out
// changes, and on success out's tables of an earlier merge or run that this merge does not hold are
// removed. ctx stops it between record batches, with the same guarantee: nothing at out changes.
func Merge(ctx context.Context, out string, dirs []string, opts MergeOptions) (MergeSummary, error) {
	sum := MergeSummary{Rows: map[string]int64{}}
	if _, err := tables.FormatOf(out); err != nil {
		return sum, err
	}
	srcs, err := mergeSources(dirs, opts.Partial)
	if err != nil {
		return sum, err
	}
	sum.Dirs, sum.Parts, sum.Conversations = len(dirs), srcs.parts, len(srcs.order)
	if sum.Conversations == 0 { // an empty set would replace out's tables with none
		return sum, fmt.Errorf("job: merge: %s hold no finished conversation yet: nothing was written, and the tables at %s are as they were",
			strings.Join(dirs, ", "), out)
	}
	var set []tables.TableSource
	var mergers []*merger
	for _, name := range tables.TableNames {
		if !srcs.tables[name] {
			continue
		}
		m := newMerger(ctx, name, srcs, opts.ResultSet)
		defer m.Release()
		set = append(set, tables.TableSource{Name: name, Reader: m})
		mergers = append(mergers, m)
	}
	paths, err := tables.WriteSetFrom(ctx, out, set)
	if err != nil {
		return sum, fmt.Errorf("job: merge: %w", err)
	}
	for i, path := range paths {
		sum.Files = append(sum.Files, path)
		sum.Rows[mergers[i].name] = mergers[i].rows
		if opts.Log != nil {
			opts.Log(fmt.Sprintf("merge: wrote %s (%s rows)", path, numtext.Commas(mergers[i].rows)))
		}
	}
	return sum, nil
}

// block is rows [from, to) of one record batch of a part's table.
type block struct {
	rec      arrow.RecordBatch
	from, to int64
}

// partTable is one part's table, loaded, with each conversation's rows.
type partTable struct {
	path string
	t    *tables.Table
	rows map[int32][]block
	left int   // conversations not yet emitted
	sent int64 // rows emitted
}

// merger is an array.RecordReader over the merged rows of one table: it walks the conversations by
// seq_id, loads each part's table when its first conversation comes and drops it after its last, and cuts
// batches of the size a single replay's table has.
type merger struct {
	ctx     context.Context // Merge's: a stopped merge ends its readers with ctx's error
	name    string
	src     *sources
	stamp   string // MergeOptions.ResultSet
	next    int    // index into src.order
	open    map[string]*partTable
	parts   *arrow.Schema // the parts' schema, which every part must have
	schema  *arrow.Schema // the merged table's: parts, with stamp as its MetaResultSet and the key as its MetaRequestHash
	maxRows int64
	pending []block // rows waiting for the next batch (slices, retained)
	npend   int64
	cur     arrow.RecordBatch
	err     error
	rows    int64
	mem     memory.Allocator
}

// newMerger returns the merger of table name over src; stamp, when set, is the merged table's
// MetaResultSet.
func newMerger(ctx context.Context, name string, src *sources, stamp string) *merger {
	return &merger{ctx: ctx, name: name, src: src, stamp: stamp, open: map[string]*partTable{}, mem: memory.DefaultAllocator}
}

// Retain does nothing: Merge owns its mergers and releases each once.
func (m *merger) Retain() {}

// Release drops the loaded parts and the current batch.
func (m *merger) Release() {
	if m.cur != nil {
		m.cur.Release()
		m.cur = nil
	}
	for _, b := range m.pending {
		b.rec.Release()
	}
	m.pending = nil
	for k, p := range m.open {
		p.t.Release()
		delete(m.open, k)
	}
}

// Schema is the merged table's schema (read from the first part when not yet known); it is nil when
// that part does not read, and Err then says why.
func (m *merger) Schema() *arrow.Schema {
	if m.schema == nil && m.err == nil {
		m.err = m.loadSchema()
	}
	return m.schema
}

// RecordBatch is the batch Next made; it is valid until the next call to Next.
func (m *merger) RecordBatch() arrow.RecordBatch { return m.cur }

// Record is RecordBatch under its older name (array.RecordReader asks for both).
func (m *merger) Record() arrow.RecordBatch { return m.cur }

// Err is the error that ended the batches, or nil.
func (m *merger) Err() error { return m.err }

// loadSchema opens the part of the first conversation that has this table.
func (m *merger) loadSchema() error {
	for _, pl := range m.src.order {
		p, err := m.part(pl.part)
		if err != nil {
			return err
		}
		if p.t != nil {
			return nil
		}
	}
	return fmt.Errorf("job: merge: no part holds table %s", m.name)
}

// part returns the loaded table of part (a part's key, sources.files), loading it first.
func (m *merger) part(part string) (*partTable, error) {
	if p, ok := m.open[part]; ok {
		return p, nil
	}
	path, ok := m.src.files[part][m.name]
	if !ok { // checkFiles refuses this first; kept so that the merger never guesses a path
		return nil, fmt.Errorf("job: merge: part %s has no %s table", part, m.name)
	}
	t, err := tables.ReadParquet(path, m.mem)
	if err != nil {
		return nil, fmt.Errorf("job: merge: %w", err)
	}
	if m.parts == nil {
		m.parts = t.Schema
		m.schema = t.Schema
		if m.stamp != "" {
			m.schema = tables.WithMetadata(t.Schema, map[string]string{tables.MetaResultSet: m.stamp, tables.MetaRequestHash: m.src.key})
		}
		m.maxRows = batchRows(t.Schema)
	} else if !m.parts.Equal(t.Schema) || !m.parts.Metadata().Equal(t.Schema.Metadata()) {
		t.Release()
		return nil, fmt.Errorf("job: merge: %s's schema differs from the other parts'", path)
	}
	p := &partTable{path: path, t: t, rows: map[int32][]block{}, left: m.src.count[part]}
	last := int32(-1)
	for _, rec := range t.Records {
		col, ok := rec.Column(0).(*array.Int32)
		if !ok || rec.Schema().Field(0).Name != "seq_id" {
			t.Release()
			return nil, fmt.Errorf("job: merge: %s: the first column is not seq_id int32", path)
		}
		for i := 0; i < col.Len(); i++ {
			s := col.Value(i)
			bs := p.rows[s]
			if s != last && len(bs) > 0 {
				t.Release()
				return nil, fmt.Errorf("job: merge: %s: the rows of seq_id %d are not contiguous", path, s)
			}
			if n := len(bs); n > 0 && bs[n-1].rec == rec && bs[n-1].to == int64(i) {
				bs[n-1].to++
			} else {
				bs = append(bs, block{rec, int64(i), int64(i) + 1})
			}
			p.rows[s], last = bs, s
		}
	}
	m.open[part] = p
	return p, nil
}

// batchRows is the rows per batch of a single replay's table (tables.NewReader's rule): DefaultBatchRows,
// and for hidden vectors also at most 64 MiB of them a batch.
func batchRows(s *arrow.Schema) int64 {
	rows := int64(tables.DefaultBatchRows)
	if tables.TableName(s) == tables.HiddenTable {
		for _, f := range s.Fields() {
			if l, ok := f.Type.(*arrow.FixedSizeListType); ok {
				elem := int64(4)
				if l.Elem().ID() == arrow.FLOAT16 {
					elem = 2
				}
				rows = min(rows, max(1, (64<<20)/(int64(l.Len())*elem)))
			}
		}
	}
	return rows
}

// Next makes the next batch.
func (m *merger) Next() bool {
	if m.cur != nil {
		m.cur.Release()
		m.cur = nil
	}
	if m.err != nil || m.Schema() == nil {
		return false
	}
	if err := m.ctx.Err(); err != nil {
		m.err = fmt.Errorf("job: merge stopped: %w", err)
		return false
	}
	for m.npend < m.maxRows && m.next < len(m.src.order) {
		pl := m.src.order[m.next]
		m.next++
		p, err := m.part(pl.part)
		if err != nil {
			m.err = err
			return false
		}
		bs, ok := p.rows[int32(pl.seq)]
		if !ok {
			m.err = fmt.Errorf("job: merge: %s has no rows of seq_id %d, which its manifest places there", p.path, pl.seq)
			return false
		}
		for _, b := range bs {
			m.pending = append(m.pending, block{b.rec.NewSlice(b.from, b.to), 0, b.to - b.from})
			m.npend += b.to - b.from
			p.sent += b.to - b.from
		}
		if p.left--; p.left == 0 {
			// Rows of a conversation the manifest does not place in this part would be dropped unseen.
			if held := p.t.NumRows(); p.sent != held {
				m.err = fmt.Errorf("job: merge: %s holds %d rows, the conversations its manifest places there %d", p.path, held, p.sent)
				return false
			}
			p.t.Release() // the pending slices keep what they need
			delete(m.open, pl.part)
		}
	}
	if m.npend == 0 {
		return false
	}
	n := min(m.npend, m.maxRows)
	m.cur, m.err = m.cut(n)
	if m.err != nil {
		return false
	}
	m.rows += n
	return true
}

// cut concatenates the first n pending rows into one batch.
func (m *merger) cut(n int64) (arrow.RecordBatch, error) {
	var take []arrow.RecordBatch
	var got int64
	for got < n {
		b := m.pending[0]
		k := min(b.to-b.from, n-got)
		take = append(take, b.rec.NewSlice(b.from, b.from+k))
		got += k
		if b.from+k == b.to {
			b.rec.Release()
			m.pending = m.pending[1:]
		} else {
			m.pending[0].from += k
		}
	}
	m.npend -= n
	defer func() {
		for _, r := range take {
			r.Release()
		}
	}()
	cols := make([]arrow.Array, m.schema.NumFields())
	for c := range cols {
		parts := make([]arrow.Array, len(take))
		for i, r := range take {
			parts[i] = r.Column(c)
		}
		col, err := array.Concatenate(parts, m.mem)
		if err != nil {
			for _, done := range cols[:c] {
				done.Release()
			}
			return nil, fmt.Errorf("job: merge: table %s: %w", m.name, err)
		}
		cols[c] = col
	}
	rec := array.NewRecordBatch(m.schema, cols, n)
	for _, c := range cols {
		c.Release()
	}
	return rec, nil
}

var _ array.RecordReader = (*merger)(nil)
