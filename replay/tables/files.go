package tables

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// The file layout of a Set: one file per table, named by inserting the table name before the extension,
// so that --out results.arrow gives
//
//	results.tokens.arrow  results.lens.arrow  results.hidden.arrow  results.router.arrow  results.attnres.arrow
//
// (only the tables the Set holds). One file per table because an Arrow IPC stream or a Parquet file holds
// exactly one schema: each file is then a plain table that pyarrow, polars and DuckDB open with no
// knowledge of this package, and a researcher can ls the directory and see what was captured. The
// extension picks the format: .arrow or .arrows an Arrow IPC stream, .parquet a Parquet file.

// Format names returned by FormatOf.
const (
	FormatIPC     = "arrow"
	FormatParquet = "parquet"
)

// FormatOf returns FormatIPC for a path ending in .arrow or .arrows, FormatParquet for .parquet, and an
// error naming the path otherwise.
func FormatOf(path string) (string, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".arrow", ".arrows":
		return FormatIPC, nil
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
	if format == FormatParquet {
		return WriteParquet(path, t)
	}
	return writeAtomic(path, func(w io.Writer) error { return WriteTableIPC(w, t) })
}

// ReadFile reads the table at path in the format its extension names (see FormatOf). mem allocates the
// records; nil means memory.DefaultAllocator. The caller releases the table.
func ReadFile(path string, mem memory.Allocator) (*Table, error) {
	format, err := FormatOf(path)
	if err != nil {
		return nil, err
	}
	if format == FormatParquet {
		return ReadParquet(path, mem)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}
	defer f.Close()
	t, err := ReadIPC(bufio.NewReaderSize(f, 1<<20), mem)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return t, nil
}

// WriteSet writes every table of s to TablePath(path, name), each atomically, and returns the paths it
// wrote. Tables the set does not hold are not written, and files left by an earlier run for them are not
// removed. On error the tables written so far stay.
func WriteSet(path string, s *Set) ([]string, error) {
	if _, err := FormatOf(path); err != nil {
		return nil, err
	}
	var written []string
	for _, t := range s.Tables() {
		p := TablePath(path, t.Name)
		if err := WriteFile(p, t); err != nil {
			return written, err
		}
		written = append(written, p)
	}
	return written, nil
}

// ReadSet reads the tables at TablePath(path, name) for every name in TableNames that has a file, and
// checks that each file's "potato.table" metadata, when present, names the table its path says. It fails
// when no table file exists. The caller releases the set.
func ReadSet(path string, mem memory.Allocator) (*Set, error) {
	if _, err := FormatOf(path); err != nil {
		return nil, err
	}
	set, found := &Set{}, 0
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
	}
	if found == 0 {
		return nil, fmt.Errorf("tables: no table files %s: %w", TablePath(path, "*"), fs.ErrNotExist)
	}
	return set, nil
}

// writeAtomic calls write with a buffered temporary file beside path, syncs it and renames it to path.
// On any error the temporary file is removed and path is untouched.
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
