package tables

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// parquetReadBatch is the rows per record batch read back from Parquet: DefaultBatchRows, so that a round
// trip of the token tables gives back batches of the size Build made.
const parquetReadBatch = DefaultBatchRows

// WriteParquet writes t to path as one Parquet file, atomically (see WriteFile).
func WriteParquet(path string, t *Table) error {
	return writeAtomic(path, func(w io.Writer) error { return WriteTableParquet(w, t) })
}

// WriteTableParquet writes t to w as one Parquet file (see WriteParquetFrom).
func WriteTableParquet(w io.Writer, t *Table) error {
	rr, err := t.Reader()
	if err != nil {
		return err
	}
	defer rr.Release()
	return WriteParquetFrom(w, rr)
}

// WriteParquetFrom writes every batch rr yields to w as one Parquet file, one row group per batch,
// zstd-compressed (better ratio than snappy on float columns at a decode speed readers do not notice). The
// Arrow schema is stored in the file (ARROW:schema), so that what Parquet lacks comes back exactly:
// int32 stays int32, float16 and fixed_size_list vectors keep their type; the schema metadata is also
// written as the file's key-value metadata, where tools that ignore ARROW:schema find it. It does not
// release rr. A reader without a schema (one that failed before it knew it) is an error carrying rr.Err.
func WriteParquetFrom(w io.Writer, rr array.RecordReader) (err error) {
	name := "a table"
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("tables: writing %s as Parquet: %v", name, p)
		}
	}()
	if rr.Schema() == nil {
		return noSchema("Parquet", rr)
	}
	name = TableName(rr.Schema())
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd))
	fw, err := pqarrow.NewFileWriter(rr.Schema(), w, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return fmt.Errorf("tables: writing %s as Parquet: %w", name, err)
	}
	batch := 0
	for rr.Next() {
		if err := fw.Write(rr.RecordBatch()); err != nil {
			fw.Close()
			return fmt.Errorf("tables: writing %s as Parquet: batch %d: %w", name, batch, err)
		}
		batch++
	}
	if err := rr.Err(); err != nil {
		fw.Close()
		return fmt.Errorf("tables: writing %s as Parquet: batch %d: %w", name, batch, err)
	}
	if err := fw.Close(); err != nil {
		return fmt.Errorf("tables: writing %s as Parquet: footer: %w", name, err)
	}
	return nil
}

// noSchema is a writer's error for a reader without a schema: the reader failed before it knew one (a
// merge whose first part file does not read), and its Err says why.
func noSchema(format string, rr array.RecordReader) error {
	if err := rr.Err(); err != nil {
		return fmt.Errorf("tables: writing %s: the reader has no schema: %w", format, err)
	}
	return fmt.Errorf("tables: writing %s: the reader has no schema", format)
}

// ParquetRows returns the rows of the Parquet file at path, read from its footer alone (a dataset
// merge checks every part against its manifest before it reads any). A file that is not Parquet, or is
// cut short, is an error naming path.
func ParquetRows(path string) (n int64, err error) {
	// The Parquet reader panics on some malformed footers; no panic leaves this package.
	defer func() {
		if p := recover(); p != nil {
			n, err = 0, fmt.Errorf("tables: reading Parquet: %v (file %s)", p, path)
		}
	}()
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return 0, fmt.Errorf("tables: reading Parquet: %w (file %s)", err, path)
	}
	defer pf.Close()
	return pf.NumRows(), nil
}

// ReadParquet reads the Parquet file at path into a Table (see ReadParquetFrom).
func ReadParquet(path string, mem memory.Allocator) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}
	defer f.Close()
	t, err := ReadParquetFrom(f, mem)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return t, nil
}

// ReadParquetFrom reads one Parquet file into a Table whose Name is the schema's "potato.table" metadata
// ("" for a file written by another tool), in batches of up to DefaultBatchRows rows. mem allocates the
// record buffers; nil means memory.DefaultAllocator. The caller releases the table.
func ReadParquetFrom(r parquet.ReaderAtSeeker, mem memory.Allocator) (t *Table, err error) {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	// The Parquet reader panics on some malformed files; no panic leaves this package.
	defer func() {
		if p := recover(); p != nil {
			t.Release()
			t, err = nil, fmt.Errorf("tables: reading Parquet: %v", p)
		}
	}()
	pf, err := file.NewParquetReader(r)
	if err != nil {
		return nil, fmt.Errorf("tables: reading Parquet: %w", err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: parquetReadBatch}, mem)
	if err != nil {
		return nil, fmt.Errorf("tables: reading Parquet: %w", err)
	}
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	if err != nil {
		return nil, fmt.Errorf("tables: reading Parquet: %w", err)
	}
	defer rr.Release()
	// The record reader's schema lacks the schema metadata; the file reader's has it.
	fileSchema, err := fr.Schema()
	if err != nil {
		return nil, fmt.Errorf("tables: reading Parquet: %w", err)
	}
	t = &Table{Schema: cleanSchema(fileSchema)}
	t.Name = TableName(t.Schema)
	for rr.Next() {
		rec, err := relabel(rr.RecordBatch(), t.Schema)
		if err != nil {
			t.Release()
			return nil, fmt.Errorf("tables: reading Parquet %s: batch %d: %w", t.Name, len(t.Records), err)
		}
		t.Records = append(t.Records, rec)
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		t.Release()
		return nil, fmt.Errorf("tables: reading Parquet %s: batch %d: %w", t.Name, len(t.Records), err)
	}
	return t, nil
}
