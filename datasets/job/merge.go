package job

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/potato-k3/potato-k3/replay/tables"
)

// MergeOptions tune Merge.
type MergeOptions struct {
	// Partial accepts directories whose job is not complete and shard sets with shards missing; by default
	// Merge refuses them, since the result would silently lack conversations.
	Partial bool
	Log     func(string)
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
// batches: the files equal a single run's byte for byte. The directories must hold one job (one key) and,
// unless opts.Partial, every shard of it, complete; no conversation may appear twice.
func Merge(out string, dirs []string, opts MergeOptions) (MergeSummary, error) {
	sum := MergeSummary{Rows: map[string]int64{}}
	if _, err := tables.FormatOf(out); err != nil {
		return sum, err
	}
	srcs, err := mergeSources(dirs, opts.Partial)
	if err != nil {
		return sum, err
	}
	sum.Dirs, sum.Parts, sum.Conversations = len(dirs), srcs.parts, len(srcs.order)
	for _, name := range tables.TableNames {
		if !srcs.tables[name] {
			continue
		}
		path := tables.TablePath(out, name)
		rr := newMerger(name, srcs)
		err := writeTable(path, rr)
		rows := rr.rows
		rr.Release()
		if err != nil {
			return sum, err
		}
		sum.Files = append(sum.Files, path)
		sum.Rows[name] = rows
		if opts.Log != nil {
			opts.Log(fmt.Sprintf("merge: wrote %s (%s rows)", path, commas(rows)))
		}
	}
	return sum, nil
}

// writeTable writes rr's batches to path atomically in the format its extension names.
func writeTable(path string, rr array.RecordReader) error {
	format, _ := tables.FormatOf(path)
	return writeAtomic(path, func(w io.Writer) error {
		switch format {
		case tables.FormatParquet:
			return tables.WriteParquetFrom(w, rr)
		case tables.FormatIPC: // .arrow: the IPC file format, as every table file named so
			return tables.WriteIPCFileFrom(w, rr)
		}
		return tables.WriteIPCFrom(w, rr)
	})
}

// sources are the parts of every directory, with the merged order of their conversations.
type sources struct {
	order  []placed        // every conversation, by seq_id
	count  map[string]int  // conversations per part path prefix
	tables map[string]bool // tables some part holds
	parts  int
}

// placed is one conversation and the part (directory + part name) that holds its rows.
type placed struct {
	seq  int
	part string // filepath.Join(dir, part name)
}

// mergeSources reads and checks the manifests of dirs.
func mergeSources(dirs []string, partial bool) (*sources, error) {
	if len(dirs) == 0 {
		return nil, fmt.Errorf("job: merge: no directories")
	}
	s := &sources{count: map[string]int{}, tables: map[string]bool{}}
	var first *Manifest
	shards := map[string]string{} // shard -> directory
	count := 0
	seqs := map[int]string{}
	ids := map[string]string{}
	for _, dir := range dirs {
		m, err := ReadManifest(dir)
		if err != nil {
			return nil, err
		}
		if first == nil {
			first = m
		} else if m.Key != first.Key {
			return nil, fmt.Errorf("job: merge: %s and %s hold jobs of different settings: %s", dirs[0], dir,
				strings.Join(first.Settings.Diff(m.Settings), "; "))
		}
		sh, err := ParseShard(m.Shard)
		if err != nil {
			return nil, fmt.Errorf("job: merge: %s: %w", dir, err)
		}
		if other, ok := shards[m.Shard]; ok {
			return nil, fmt.Errorf("job: merge: %s and %s both hold shard %s", other, dir, m.Shard)
		}
		shards[m.Shard] = dir
		if count == 0 {
			count = sh.Count
		} else if sh.Count != count && !partial {
			return nil, fmt.Errorf("job: merge: %s is shard %s, others are of %d shards", dir, m.Shard, count)
		}
		if !m.Complete && !partial {
			return nil, fmt.Errorf("job: merge: %s is not complete (%d of %d conversations): finish it (run the same command again) or give --partial",
				dir, len(m.Done), m.ShardConversations)
		}
		for _, p := range m.Parts {
			s.parts++
			for name := range p.Files {
				s.tables[name] = true
			}
		}
		for id, d := range m.Done {
			if other, ok := ids[id]; ok {
				return nil, fmt.Errorf("job: merge: conversation %q is in %s and in %s", id, other, dir)
			}
			if other, ok := seqs[d.SeqID]; ok {
				return nil, fmt.Errorf("job: merge: seq_id %d is in %s and in %s", d.SeqID, other, dir)
			}
			ids[id], seqs[d.SeqID] = dir, dir
			part := filepath.Join(dir, d.Part)
			s.order = append(s.order, placed{d.SeqID, part})
			s.count[part]++
		}
	}
	if !partial {
		if len(shards) != count {
			var missing []string
			for i := 0; i < count; i++ {
				if _, ok := shards[fmt.Sprintf("%d/%d", i, count)]; !ok {
					missing = append(missing, fmt.Sprintf("%d/%d", i, count))
				}
			}
			return nil, fmt.Errorf("job: merge: shards %s are missing (or give --partial)", strings.Join(missing, ", "))
		}
		if len(s.order) != first.Conversations {
			return nil, fmt.Errorf("job: merge: the directories hold %d conversations of the dataset's %d", len(s.order), first.Conversations)
		}
	}
	sort.Slice(s.order, func(i, j int) bool { return s.order[i].seq < s.order[j].seq })
	return s, nil
}

// block is rows [from, to) of one record batch of a part's table.
type block struct {
	rec      arrow.RecordBatch
	from, to int64
}

// partTable is one part's table, loaded, with each conversation's rows.
type partTable struct {
	t    *tables.Table
	rows map[int32][]block
	left int // conversations not yet emitted
}

// merger is an array.RecordReader over the merged rows of one table: it walks the conversations by
// seq_id, loads each part's table when its first conversation comes and drops it after its last, and cuts
// batches of the size a single replay's table has.
type merger struct {
	name    string
	src     *sources
	next    int // index into src.order
	open    map[string]*partTable
	schema  *arrow.Schema
	maxRows int64
	pending []block // rows waiting for the next batch (slices, retained)
	npend   int64
	cur     arrow.RecordBatch
	err     error
	rows    int64
	mem     memory.Allocator
}

func newMerger(name string, src *sources) *merger {
	return &merger{name: name, src: src, open: map[string]*partTable{}, mem: memory.DefaultAllocator}
}

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

// Schema is the parts' schema (read from the first part when not yet known).
func (m *merger) Schema() *arrow.Schema {
	if m.schema == nil && m.err == nil {
		m.err = m.loadSchema()
	}
	return m.schema
}

func (m *merger) RecordBatch() arrow.RecordBatch { return m.cur }
func (m *merger) Record() arrow.RecordBatch      { return m.cur }
func (m *merger) Err() error                     { return m.err }

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

// part returns the loaded table of part (a directory joined with a part name), loading it first.
func (m *merger) part(part string) (*partTable, error) {
	if p, ok := m.open[part]; ok {
		return p, nil
	}
	path := part + "." + m.name + ".parquet"
	t, err := tables.ReadParquet(path, m.mem)
	if err != nil {
		return nil, fmt.Errorf("job: merge: %w", err)
	}
	if m.schema == nil {
		m.schema = t.Schema
		m.maxRows = batchRows(t.Schema)
	} else if !m.schema.Equal(t.Schema) || !m.schema.Metadata().Equal(t.Schema.Metadata()) {
		t.Release()
		return nil, fmt.Errorf("job: merge: %s's schema differs from the other parts'", path)
	}
	p := &partTable{t: t, rows: map[int32][]block{}, left: m.src.count[part]}
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
			m.err = fmt.Errorf("job: merge: %s.%s.parquet has no rows of seq_id %d, which its manifest names", pl.part, m.name, pl.seq)
			return false
		}
		for _, b := range bs {
			m.pending = append(m.pending, block{b.rec.NewSlice(b.from, b.to), 0, b.to - b.from})
			m.npend += b.to - b.from
		}
		if p.left--; p.left == 0 {
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
