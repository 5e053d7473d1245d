package datasets

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// The Parquet plumbing shared by the dataset reader and the results cache: read a whole file as record
// batches, write record batches as one file.

// readBatchSize is the rows per record batch read back from Parquet.
const readBatchSize = 64 << 10

// eachParquetBatch calls fn with every record batch of the Parquet data in r, in order, and returns the
// file's Arrow schema. fn must Retain a batch it keeps. A panic inside the Arrow reader (possible on
// malformed files) comes back as an error: no panic leaves this package.
func eachParquetBatch(r parquet.ReaderAtSeeker, mem memory.Allocator, fn func(arrow.RecordBatch) error) (schema *arrow.Schema, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("parquet reader failed: %v", p)
		}
	}()
	pf, err := file.NewParquetReader(r)
	if err != nil {
		return nil, err
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: readBatchSize}, mem)
	if err != nil {
		return nil, err
	}
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	if err != nil {
		return nil, err
	}
	defer rr.Release()
	for rr.Next() {
		if err := fn(rr.RecordBatch()); err != nil {
			return nil, err
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return rr.Schema(), nil
}

// readParquetBatches returns every record batch of the Parquet data in r; the caller releases them. A
// file with no rows gives one empty batch, so that its schema is not lost.
func readParquetBatches(r parquet.ReaderAtSeeker, mem memory.Allocator) ([]arrow.RecordBatch, error) {
	var recs []arrow.RecordBatch
	schema, err := eachParquetBatch(r, mem, func(rec arrow.RecordBatch) error {
		rec.Retain()
		recs = append(recs, rec)
		return nil
	})
	if err != nil {
		releaseAll(recs)
		return nil, err
	}
	if len(recs) == 0 {
		b := array.NewRecordBuilder(mem, schema)
		defer b.Release()
		recs = append(recs, b.NewRecordBatch())
	}
	return recs, nil
}

// writeParquet writes recs (all of schema) to w as one Parquet file, zstd-compressed, one row group per
// batch. The Arrow schema is stored in the file so that types Parquet lacks (fixed_size_list, float16
// vectors, int32 kept as int32) read back exactly. w is not closed, even if it is an io.Closer (the Parquet
// writer would close it, and the cache must sync the file first).
func writeParquet(w io.Writer, schema *arrow.Schema, recs []arrow.RecordBatch) (err error) {
	w = struct{ io.Writer }{w} // hides Close
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("parquet writer failed: %v", p)
		}
	}()
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd))
	fw, err := pqarrow.NewFileWriter(schema, w, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return err
	}
	for i, rec := range recs {
		if !rec.Schema().Equal(schema) {
			fw.Close()
			return fmt.Errorf("record %d has schema %s, want %s", i, rec.Schema(), schema)
		}
		if err := fw.Write(rec); err != nil {
			fw.Close()
			return fmt.Errorf("record %d: %w", i, err)
		}
	}
	return fw.Close()
}

// releaseAll releases every batch in recs.
func releaseAll(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}
