package datasets

import (
	"bytes"
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

// storedSchemaKey is the file metadata key under which Arrow writers store the Arrow schema.
const storedSchemaKey = "ARROW:schema"

// parquetMagic opens and closes every Parquet file.
var parquetMagic = []byte("PAR1")

// checkParquetEdges refuses data that does not open with PAR1 (not Parquet: a JSONL file named .parquet
// read as "parquet: file is smaller than indicated metadata size") or does not close with it (cut short:
// the footer is written last).
func checkParquetEdges(r parquet.ReaderAtSeeker) error {
	size, err := r.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	head := make([]byte, min(16, size))
	r.ReadAt(head, 0)
	tail := make([]byte, min(int64(len(parquetMagic)), size))
	r.ReadAt(tail, size-int64(len(tail)))
	switch {
	case !bytes.HasPrefix(head, parquetMagic):
		return fmt.Errorf("not a Parquet file: it does not start with PAR1 (it starts with %q)", head)
	case size < 2*int64(len(parquetMagic)) || !bytes.Equal(tail, parquetMagic):
		return fmt.Errorf("a Parquet file cut short (%d bytes): it does not end with PAR1, as a file written to its end does", size)
	}
	return nil
}

// eachParquetBatch calls fn with every record batch of the Parquet data in r, in order, and returns the
// file's Arrow schema. fn must Retain a batch it keeps. A panic inside the Arrow reader (possible on
// malformed files) comes back as an error: no panic leaves this package.
//
// trusted is true only for files this package wrote. An untrusted file (a dataset) is read so that no
// length in it can make arrow-go allocate what the file does not hold, since a runtime out-of-memory is
// no panic and nothing recovers it (the fuzzer found both, in files of under 1 kB):
//   - the Arrow schema a writer stored in the file is not decoded: its decoder makes slices as long as
//     the bytes claim (153 GB asked). The types come from the Parquet schema, which holds everything a
//     conversation needs;
//   - every column chunk must lie inside the file (checkChunks): arrow-go reads a chunk whole into a
//     buffer of the size the footer claims (16 GB asked for a chunk of a 1 kB file), and a negative size
//     panics on one of its own goroutines, where no recover reaches.
func eachParquetBatch(r parquet.ReaderAtSeeker, mem memory.Allocator, trusted bool, fn func(arrow.RecordBatch) error) (schema *arrow.Schema, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("parquet reader failed: %v", p)
		}
	}()
	if err := checkParquetEdges(r); err != nil {
		return nil, err
	}
	pf, err := file.NewParquetReader(r)
	if err != nil {
		return nil, err
	}
	defer pf.Close()
	if !trusted {
		if err := checkChunks(pf, r); err != nil {
			return nil, err
		}
		for _, kv := range pf.MetaData().KeyValueMetadata() {
			if kv != nil && kv.Key == storedSchemaKey {
				kv.Key += " (not decoded)" // pqarrow then reads the Parquet schema only
			}
		}
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: readBatchSize}, mem)
	if err != nil {
		return nil, err
	}
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	if err != nil {
		return nil, err
	}
	defer rr.Release()
	origin := fr.Manifest.OriginSchema
	if !sameTypes(origin, rr.Schema()) {
		origin = nil // no stored Arrow schema (a file written elsewhere): take the types as read
	}
	for rr.Next() {
		rec := rr.RecordBatch()
		if origin != nil {
			rec = retypeBatch(origin, rec)
		}
		err := fn(rec)
		if origin != nil {
			rec.Release()
		}
		if err != nil {
			return nil, err
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if origin != nil {
		return origin, nil
	}
	return rr.Schema(), nil
}

// checkChunks refuses a file whose footer places a column chunk outside the file, naming the row group
// and column. The chunk's start is computed as arrow-go's RowGroupReader.GetColumnPageReader does.
func checkChunks(pf *file.Reader, r io.Seeker) error {
	size, err := r.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	md := pf.MetaData()
	for g := range md.NumRowGroups() {
		rg := md.RowGroup(g)
		for c := range rg.NumColumns() {
			col, err := rg.ColumnChunk(c)
			if err != nil {
				return fmt.Errorf("row group %d column %d: %w", g, c, err)
			}
			start, n := col.DataPageOffset(), col.TotalCompressedSize()
			if col.HasDictionaryPage() && col.DictionaryPageOffset() > 0 && start > col.DictionaryPageOffset() {
				start = col.DictionaryPageOffset()
			}
			if start < 0 || n < 0 || start > size || n > size-start {
				return fmt.Errorf("row group %d column %d: chunk of %d bytes at offset %d does not fit in the file (%d bytes)",
					g, c, n, start, size)
			}
		}
	}
	return nil
}

// sameTypes reports whether the schema read back has the stored schema's field names and types. The read
// schema still differs in what Parquet cannot keep: list element names ("element" for Arrow's "item") and
// a "PARQUET:field_id" metadata entry on every field, which make schema.Equal fail against the original.
func sameTypes(origin, read *arrow.Schema) bool {
	if origin == nil || origin.NumFields() != read.NumFields() {
		return false
	}
	for i, f := range origin.Fields() {
		if f.Name != read.Field(i).Name || !arrow.TypeEqual(f.Type, read.Field(i).Type) {
			return false
		}
	}
	return true
}

// retypeBatch returns rec with the schema it was written with (see sameTypes); the caller releases it.
func retypeBatch(schema *arrow.Schema, rec arrow.RecordBatch) arrow.RecordBatch {
	cols := make([]arrow.Array, rec.NumCols())
	for i, c := range rec.Columns() {
		d := retype(c.Data(), schema.Field(i).Type)
		cols[i] = array.MakeFromData(d)
		d.Release()
	}
	out := array.NewRecordBatch(schema, cols, rec.NumRows())
	for _, c := range cols {
		c.Release()
	}
	return out
}

// retype gives d the type dt, which arrow.TypeEqual holds equal to d's own, recursing into the children
// of nested types so that each carries its own field of dt. The buffers are shared, not copied.
func retype(d arrow.ArrayData, dt arrow.DataType) arrow.ArrayData {
	if d.Dictionary() != nil || dt.ID() == arrow.EXTENSION {
		d.Retain() // types that carry more than children: keep as read (equal by arrow.TypeEqual)
		return d
	}
	var childTypes []arrow.DataType
	switch t := dt.(type) {
	case arrow.ListLikeType: // list, large list, fixed-size list, map
		childTypes = []arrow.DataType{t.Elem()}
	case *arrow.StructType:
		for _, f := range t.Fields() {
			childTypes = append(childTypes, f.Type)
		}
	}
	children := d.Children()
	if len(childTypes) != len(children) {
		childTypes = nil // not a shape this knows: keep the children as read
	}
	newChildren := make([]arrow.ArrayData, len(children))
	for i, c := range children {
		if childTypes != nil {
			newChildren[i] = retype(c, childTypes[i])
		} else {
			c.Retain()
			newChildren[i] = c
		}
	}
	out := array.NewData(dt, d.Len(), d.Buffers(), newChildren, d.NullN(), d.Offset())
	for _, c := range newChildren {
		c.Release()
	}
	return out
}

// readParquetBatches returns every record batch of the Parquet data in r; the caller releases them. A
// file with no rows gives one empty batch, so that its schema is not lost.
func readParquetBatches(r parquet.ReaderAtSeeker, mem memory.Allocator) ([]arrow.RecordBatch, error) {
	var recs []arrow.RecordBatch
	schema, err := eachParquetBatch(r, mem, true, func(rec arrow.RecordBatch) error {
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
