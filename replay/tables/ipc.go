package tables

import (
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/potato-k3/potato-k3/internal/arrowend"
)

// ContentType is the media type of the Arrow IPC stream format, for HTTP responses carrying WriteIPC's
// output.
const ContentType = "application/vnd.apache.arrow.stream"

// WriteIPC writes recs, which must share one schema, to w as one Arrow IPC stream: the schema message
// (with its metadata), one message per record batch, and the end-of-stream marker. The stream format
// rather than the file format because it can be written to a socket without seeking and every Arrow
// library reads it (pyarrow.ipc.open_stream, polars.read_ipc_stream, DuckDB's arrow extension). Buffers
// are not compressed: IPC compression is an optional feature some readers lack, and Parquet is the
// compact format. At least one record is needed to know the schema; use WriteIPCFrom or WriteTableIPC
// for a table that may be empty.
func WriteIPC(w io.Writer, recs ...arrow.RecordBatch) error {
	if len(recs) == 0 {
		return errors.New("tables: WriteIPC: no records (the schema is unknown; use WriteTableIPC)")
	}
	rr, err := array.NewRecordReader(recs[0].Schema(), recs)
	if err != nil {
		return fmt.Errorf("tables: WriteIPC: %w", err)
	}
	defer rr.Release()
	return WriteIPCFrom(w, rr)
}

// WriteTableIPC writes t as one Arrow IPC stream (see WriteIPC); a table of no records becomes a stream
// holding only its schema.
func WriteTableIPC(w io.Writer, t *Table) error {
	rr, err := t.Reader()
	if err != nil {
		return err
	}
	defer rr.Release()
	return WriteIPCFrom(w, rr)
}

// WriteIPCFrom writes every batch rr yields to w as one Arrow IPC stream with rr's schema, so that a
// server can stream a table built by NewReader batch by batch. It does not release rr. A reader without a
// schema is an error carrying rr.Err.
func WriteIPCFrom(w io.Writer, rr array.RecordReader) (err error) {
	name := "a table"
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("tables: writing %s as Arrow IPC: %v", name, p)
		}
	}()
	if rr.Schema() == nil {
		return noSchema("Arrow IPC", rr)
	}
	name = TableName(rr.Schema())
	iw := ipc.NewWriter(w, ipc.WithSchema(rr.Schema()))
	batch := 0
	for rr.Next() {
		if err := iw.Write(rr.RecordBatch()); err != nil {
			iw.Close()
			return fmt.Errorf("tables: writing %s as Arrow IPC: batch %d: %w", name, batch, err)
		}
		batch++
	}
	if err := rr.Err(); err != nil {
		iw.Close()
		return fmt.Errorf("tables: writing %s as Arrow IPC: batch %d: %w", name, batch, err)
	}
	if err := iw.Close(); err != nil {
		return fmt.Errorf("tables: writing %s as Arrow IPC: end of stream: %w", name, err)
	}
	return nil
}

// ErrNoEndMarker is wrapped by the error of ReadIPC and ReadFile for a stream that ends without Arrow's
// end-of-stream marker: it was cut short at a message boundary (a writer killed mid-table, a full disk,
// a copy cut short), and what it holds is only the first part of a table.
var ErrNoEndMarker = errors.New("tables: truncated Arrow IPC stream")

// ReadIPC reads one Arrow IPC stream into a Table whose Name is the schema's "potato.table" metadata (""
// for a stream written by another tool). mem allocates the record buffers; nil means
// memory.DefaultAllocator. The caller releases the table.
//
// The stream must end with its end-of-stream marker (0xFFFFFFFF then a zero length, or before Arrow
// 0.15 a bare zero length); without it the error wraps ErrNoEndMarker. The format calls the marker
// optional, and arrow-go's reader takes a clean end of its input between two messages as the end of the
// stream, so a stream cut at a message boundary would otherwise read as a whole table of fewer batches
// (or of none). The stream writers write it when a stream is closed (WriteIPCFrom through arrow-go's
// ipc.Writer.Close; Arrow C++ and so pyarrow; arrow-rs and polars on finish), so a stream without it was
// never finished. Bytes after the marker are not read.
func ReadIPC(r io.Reader, mem memory.Allocator) (*Table, error) {
	return readIPC(r, mem, "the stream")
}

// readIPC is ReadIPC; what names the stream in the error for a missing end-of-stream marker (ReadFile
// gives the path).
func readIPC(r io.Reader, mem memory.Allocator, what string) (*Table, error) {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	schema, batches, err := arrowend.ReadAll(r, ipc.WithAllocator(mem))
	var cut *arrowend.CutError
	switch {
	case errors.As(err, &cut):
		named := "its schema"
		if name := TableName(schema); name != "" {
			named += " (table " + name + ")"
		}
		return nil, fmt.Errorf("%w: %s ends without Arrow's end-of-stream marker, after %s and %s (%d bytes)",
			ErrNoEndMarker, what, named, arrowend.Batches(cut.Batches), cut.Bytes)
	case err != nil && schema != nil:
		return nil, fmt.Errorf("tables: reading Arrow IPC stream %s: %w", TableName(schema), err)
	case err != nil:
		return nil, fmt.Errorf("tables: reading Arrow IPC stream: %w", err)
	}
	return &Table{Name: TableName(schema), Schema: schema, Records: batches}, nil
}
