package tables

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/potato-k3/potato-k3/internal/staging"
)

// The file layout of a Set: one file per table, named by inserting the table name before the extension,
// so that --out results.arrow gives
//
//	results.tokens.arrow  results.lens.arrow  results.hidden.arrow  results.router.arrow  results.attnres.arrow
//
// (only the tables the Set holds). One file per table because an Arrow IPC stream or a Parquet file holds
// exactly one schema: each file is then a plain table that pyarrow, polars and DuckDB open with no
// knowledge of this package, and a researcher can ls the directory and see what was captured. The
// extension picks the format: .arrow an Arrow IPC file (random access), .arrows an Arrow IPC stream,
// .parquet a Parquet file.

// Format names returned by FormatOf.
const (
	FormatIPC       = "arrow"   // the Arrow IPC file format (ipcfile.go)
	FormatIPCStream = "arrows"  // the Arrow IPC stream format (ipc.go)
	FormatParquet   = "parquet" // Parquet (parquet.go)
)

// FormatOf returns FormatIPC for a path ending in .arrow, FormatIPCStream for .arrows, FormatParquet for
// .parquet, and an error naming the path otherwise.
func FormatOf(path string) (string, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".arrow":
		return FormatIPC, nil
	case ".arrows":
		return FormatIPCStream, nil
	case ".parquet":
		return FormatParquet, nil
	}
	return "", fmt.Errorf("tables: %s: unknown extension (want .arrow, .arrows or .parquet)", path)
}

// TablePath returns the file of table name in the layout of path: TablePath("out/results.arrow",
// "tokens") is "out/results.tokens.arrow".
func TablePath(path, name string) string {
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "." + name + ext
}

// WriteFile writes t to path in the format its extension names (see FormatOf). The write is atomic: the
// data goes to a temporary file in the same directory, is synced, then renamed over path, so that a reader
// (or a crash) never sees half a table.
func WriteFile(path string, t *Table) error {
	format, err := FormatOf(path)
	if err != nil {
		return err
	}
	switch format {
	case FormatParquet:
		return WriteParquet(path, t)
	case FormatIPC:
		return writeAtomic(path, func(w io.Writer) error { return WriteTableIPCFile(w, t) })
	}
	return writeAtomic(path, func(w io.Writer) error { return WriteTableIPC(w, t) })
}

// ReadFile reads the table at path in the format its extension names (see FormatOf). A .arrow file that
// holds an Arrow IPC stream (as this package wrote before schema version 3) is read as a stream, and a
// .arrows file that holds an Arrow IPC file as a file. mem allocates the records; nil means
// memory.DefaultAllocator. The caller releases the table.
//
// A file that is not of its format, or is cut short, is refused saying so, by its first and last bytes
// (checkParquet, sniffIPC), before the reader's own message ("arrow/ipc: not an Arrow file" for a .arrow
// file cut short, "parquet: file is smaller than indicated metadata size" for a file that is not Parquet).
// A stream has no closing bytes of its own but the end-of-stream marker: one cut inside a message is
// refused as cut short, and one cut between two messages, which arrow-go reads as a whole stream, by the
// marker it lacks (ReadIPC; the error wraps ErrNoEndMarker and names the file).
func ReadFile(path string, mem memory.Allocator) (*Table, error) {
	format, err := FormatOf(path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}
	switch {
	case info.IsDir():
		return nil, fmt.Errorf("tables: %s is a directory, not a table file", path)
	case info.Size() == 0:
		return nil, fmt.Errorf("tables: %s is empty (0 bytes), not a table file", path)
	}
	if format == FormatParquet {
		if err := checkParquet(f, info.Size(), path); err != nil {
			return nil, err
		}
		return ReadParquet(path, mem)
	}
	file, err := sniffIPC(f, info.Size(), path)
	if err != nil {
		return nil, err
	}
	if file {
		t, err := ReadIPCFile(f, info.Size(), mem)
		if err != nil {
			return nil, fmt.Errorf("%w (file %s)", err, path)
		}
		return t, nil
	}
	t, err := readIPC(bufio.NewReaderSize(f, 1<<20), mem, path)
	if err != nil {
		switch {
		case errors.Is(err, ErrNoEndMarker): // cut at a message boundary: the error names path
			return nil, err
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, fmt.Errorf("tables: %s: an Arrow IPC stream cut short (%d bytes): %w", path, info.Size(), err)
		}
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return t, nil
}

// parquetMagic opens and closes every Parquet file.
var parquetMagic = []byte("PAR1")

// ipcContinuation opens every message of an Arrow IPC stream (since Arrow 0.15; the stream this package
// and pyarrow write start with one).
var ipcContinuation = []byte{0xff, 0xff, 0xff, 0xff}

// checkParquet refuses a file that does not open with PAR1 (not Parquet) or does not close with it (cut
// short: the footer, which says where everything is, is written last).
func checkParquet(r io.ReaderAt, size int64, path string) error {
	head, tail := edges(r, size, len(parquetMagic))
	switch {
	case !bytes.Equal(head, parquetMagic):
		return fmt.Errorf("tables: %s is not a Parquet file: it does not start with PAR1 (it starts with %q)", path, lead(r, size))
	case size < 2*int64(len(parquetMagic)) || !bytes.Equal(tail, parquetMagic):
		return fmt.Errorf("tables: %s: a Parquet file cut short (%d bytes): it does not end with PAR1, as a file written to its end does", path, size)
	}
	return nil
}

// sniffIPC reports whether r holds an Arrow IPC file (it opens with ARROW1) rather than a stream, and
// refuses a file cut short (an IPC file closes with ARROW1 after its footer) and one that is neither
// (a stream opens with the continuation marker 0xFFFFFFFF, or before Arrow 0.15 with the length of its
// first message, which fits in the file).
func sniffIPC(r io.ReaderAt, size int64, path string) (file bool, err error) {
	head, tail := edges(r, size, len(ipcFileMagic))
	legacy := false
	if len(head) >= 4 {
		n := int64(binary.LittleEndian.Uint32(head))
		legacy = n > 0 && n+4 <= size
	}
	switch {
	case bytes.Equal(head, ipcFileMagic) && (size < 2*int64(len(ipcFileMagic)) || !bytes.Equal(tail, ipcFileMagic)):
		return false, fmt.Errorf("tables: %s: an Arrow IPC file cut short (%d bytes): it does not end with ARROW1, as a file written to its end does", path, size)
	case bytes.Equal(head, ipcFileMagic):
		return true, nil
	case !bytes.HasPrefix(head, ipcContinuation) && !legacy:
		return false, fmt.Errorf("tables: %s is not an Arrow IPC file or stream: it starts with %q, not ARROW1 or the stream's 0xFFFFFFFF", path, lead(r, size))
	}
	return false, nil
}

// edges returns the first and the last n bytes of r (fewer where it is shorter).
func edges(r io.ReaderAt, size int64, n int) (head, tail []byte) {
	head = make([]byte, min(int64(n), size))
	r.ReadAt(head, 0)
	tail = make([]byte, min(int64(n), size))
	r.ReadAt(tail, size-int64(len(tail)))
	return head, tail
}

// lead is the first few bytes of r, for saying what a file that is not of its format holds.
func lead(r io.ReaderAt, size int64) []byte {
	b := make([]byte, min(16, size))
	r.ReadAt(b, 0)
	return b
}

// WriteSet writes every table of s to TablePath(path, name) as one result set, and returns the paths it
// wrote. The set is published whole or not at all: every table is first written and synced into a
// temporary directory beside path, and only when all are there are they renamed into place, after the
// files of tables this set does not hold (left by an earlier run under the same name) are removed, so
// that the directory never holds a new table beside an old run's. On error before the renames (a full
// disk, a table that does not write) nothing under path changes and the temporary directory is removed;
// one that a killed writer of the same set left is removed by the next write (internal/staging).
// A rename can fail only when the directory itself goes away or is made read-only in that instant; then
// the error says so, and ReadSet refuses the mixed files by their MetaResultSet.
//
// ctx is checked before every record batch and every table, and once more before the first file of an
// earlier run is removed: a set of many GB stops within one batch of a cancel (Ctrl-C, a server's
// shutdown), with an error that wraps ctx.Err() (and context.Cause(ctx) where it differs), and nothing
// under path changes. Once the renames begin the set is published to the end, whatever ctx says: a half
// published set is the one outcome the staging directory exists to prevent.
func WriteSet(ctx context.Context, path string, s *Set) ([]string, error) {
	var names []string
	for _, name := range TableNames {
		if s.Table(name) != nil {
			names = append(names, name)
		}
	}
	return writeSet(ctx, path, names, func(i int, staged string) error {
		// A held table is written through a reader over its records, as WriteSetFrom writes one, so that
		// ctx is checked between its batches too; the bytes are WriteFile's (TestWriteSetFrom).
		rr, err := s.Table(names[i]).Reader()
		if err != nil {
			return err
		}
		defer rr.Release()
		return writeFileFrom(ctx, staged, rr)
	})
}

// TableSource is one table of a set that WriteSetFrom writes batch by batch.
type TableSource struct {
	Name string // one of TableNames: the table's file is TablePath(path, Name)
	// Reader yields the table's batches; WriteSetFrom reads it to the end and does not release it. A
	// reader that fails (Err, or no Schema) fails the whole set.
	Reader array.RecordReader
}

// WriteSetFrom is WriteSet for tables read batch by batch rather than held (a merge of many parts never
// holds a whole table): each source's batches are written straight into the staging directory, in the
// order given, and the set is then published exactly as WriteSet publishes one, removing the files of
// the tables srcs do not name. Names must be distinct members of TableNames, since they choose which
// earlier files are removed; a reader whose schema names another table ("potato.table") is refused.
// ctx stops it as it stops WriteSet: before the next batch asked of a reader, with nothing under path
// changed.
func WriteSetFrom(ctx context.Context, path string, srcs []TableSource) ([]string, error) {
	names := make([]string, len(srcs))
	for i, src := range srcs {
		if !slices.Contains(TableNames, src.Name) {
			return nil, fmt.Errorf("tables: writing the result set %s: unknown table %q (want one of %v)", path, src.Name, TableNames)
		}
		if slices.Contains(names[:i], src.Name) {
			return nil, fmt.Errorf("tables: writing the result set %s: table %s given twice", path, src.Name)
		}
		names[i] = src.Name
	}
	return writeSet(ctx, path, names, func(i int, staged string) error {
		if got := TableName(srcs[i].Reader.Schema()); got != "" && got != srcs[i].Name {
			return fmt.Errorf("tables: the reader holds table %q", got)
		}
		return writeFileFrom(ctx, staged, srcs[i].Reader)
	})
}

// writeSet is WriteSet's and WriteSetFrom's publishing: write(i, staged) writes table names[i] to the
// file staged inside the temporary directory; when every table is written, the files of the tables
// names lacks are removed and the staged files renamed into place. ctx is checked before each table and
// before the first removal (write checks it between batches); after that the set is published whole.
func writeSet(ctx context.Context, path string, names []string, write func(i int, staged string) error) ([]string, error) {
	if _, err := FormatOf(path); err != nil {
		return nil, err
	}
	if err := stopped(ctx); err != nil { // not even a staging directory for a write already cancelled
		return nil, fmt.Errorf("tables: writing the result set %s: %w (nothing was replaced)", path, err)
	}
	SweepSet(path) // what a killed writer of this set left
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	st, err := staging.Mkdir(dir, "."+base+".", ".tmp")
	if err != nil {
		return nil, fmt.Errorf("tables: writing %s: %w", path, err)
	}
	defer st.Release() // removes the staged files after an error; after a good publish, only its owner file
	tmp := st.Path
	var staged, written []string
	for i, name := range names {
		if err := stopped(ctx); err != nil {
			return nil, fmt.Errorf("tables: writing the result set %s: before table %s: %w (nothing was replaced)", path, name, err)
		}
		p := TablePath(path, name)
		if err := write(i, filepath.Join(tmp, filepath.Base(p))); err != nil {
			return nil, fmt.Errorf("tables: writing the result set %s: table %s: %w (nothing was replaced)", path, name, err)
		}
		staged, written = append(staged, filepath.Join(tmp, filepath.Base(p))), append(written, p)
	}
	if err := stopped(ctx); err != nil { // the last chance to stop with nothing under path changed
		return nil, fmt.Errorf("tables: writing the result set %s: %w (nothing was replaced)", path, err)
	}
	for _, name := range TableNames {
		if slices.Contains(names, name) {
			continue
		}
		if err := os.Remove(TablePath(path, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("tables: writing the result set %s: removing an earlier run's table: %w (nothing was replaced)", path, err)
		}
	}
	for i := range staged {
		if err := os.Rename(staged[i], written[i]); err != nil {
			return written[:i], fmt.Errorf("tables: writing the result set %s: %w (%d of %d tables were replaced)", path, err, i, len(staged))
		}
	}
	_ = SyncDir(dir) // make the renames durable; the tables are in place either way
	return written, nil
}

// writeFileFrom writes rr's batches to path, atomically, in the format its extension names (WriteFile
// for a reader), and stops before the next batch once ctx is done (ctxReader).
func writeFileFrom(ctx context.Context, path string, rr array.RecordReader) error {
	format, err := FormatOf(path)
	if err != nil {
		return err
	}
	rr = &ctxReader{RecordReader: rr, ctx: ctx}
	return writeAtomic(path, func(w io.Writer) error {
		switch format {
		case FormatParquet:
			return WriteParquetFrom(w, rr)
		case FormatIPC:
			return WriteIPCFileFrom(w, rr)
		}
		return WriteIPCFrom(w, rr)
	})
}

// ReadSet reads the tables at TablePath(path, name) for every name in TableNames that has a file, and
// checks that each file's "potato.table" metadata, when present, names the table its path says, and that
// every table that carries a MetaResultSet carries the same one (tables of different runs are never one
// set). It fails when no table file exists. The caller releases the set.
func ReadSet(path string, mem memory.Allocator) (*Set, error) {
	if _, err := FormatOf(path); err != nil {
		return nil, err
	}
	set, found := &Set{}, 0
	var setID, setFrom string
	for _, name := range TableNames {
		p := TablePath(path, name)
		t, err := ReadFile(p, mem)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			set.Release()
			return nil, err
		}
		if t.Name != "" && t.Name != name {
			t.Release()
			set.Release()
			return nil, fmt.Errorf("tables: %s holds table %q, want %q", p, t.Name, name)
		}
		t.Name = name
		*set.slot(name) = t
		found++
		if id := metaValue(t.Schema, MetaResultSet); id != "" {
			if setID == "" {
				setID, setFrom = id, p
			} else if id != setID {
				set.Release()
				return nil, fmt.Errorf("tables: %s belongs to result set %s, %s to %s: tables of different runs", p, id, setFrom, setID)
			}
		}
	}
	if found == 0 {
		return nil, fmt.Errorf("tables: no table files %s: %w", TablePath(path, "*"), fs.ErrNotExist)
	}
	return set, nil
}

// WriteAtomic calls write with a buffered temporary file beside path, syncs it, renames it to path and
// syncs the directory, so that after a crash path holds its old content or the new, never part of either
// (dataset jobs write their parts and manifests with it too). On any error the temporary file is removed
// and path is untouched.
func WriteAtomic(path string, write func(io.Writer) error) error { return writeAtomic(path, write) }

func writeAtomic(path string, write func(io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return fmt.Errorf("tables: writing %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := write(bw); err != nil {
		return fmt.Errorf("%w (file %s)", err, path)
	}
	if err := finish(f, bw); err != nil {
		return fmt.Errorf("tables: writing %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("tables: writing %s: %w", path, err)
	}
	return SyncDir(dir)
}

// SyncDir makes a directory's entries (a rename into it) durable; a file system that cannot sync a
// directory is left as it is.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("tables: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, fs.ErrInvalid) {
		return fmt.Errorf("tables: syncing %s: %w", dir, err)
	}
	return nil
}

// finish flushes bw into f, makes f readable like any file the researcher writes (CreateTemp makes it
// 0600), syncs it so that the rename cannot publish a file whose data is still in flight, and closes it.
func finish(f *os.File, bw *bufio.Writer) error {
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}
