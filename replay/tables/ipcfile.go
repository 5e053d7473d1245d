package tables

import (
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// The Arrow IPC file format (random access: the stream's messages framed by the magic "ARROW1" and a
// footer that indexes every batch) is what files on disk named .arrow hold, because the readers that open
// a path expect it: pyarrow.ipc.open_file / pyarrow.feather.read_table, polars.read_ipc, DuckDB's
// read_arrow. The stream format stays for sockets (HTTP responses) and for files named .arrows.

// ipcFileMagic opens (and, with two bytes of padding, closes) every Arrow IPC file.
var ipcFileMagic = []byte("ARROW1")

// WriteTableIPCFile writes t to w as one Arrow IPC file; a table of no records becomes a file holding
// only its schema. It does not need to seek: the footer records offsets counted as bytes are written.
func WriteTableIPCFile(w io.Writer, t *Table) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("tables: writing %s as an Arrow IPC file: %v", t.Name, p)
		}
	}()
	fw, err := ipc.NewFileWriter(w, ipc.WithSchema(t.Schema))
	if err != nil {
		return fmt.Errorf("tables: writing %s as an Arrow IPC file: %w", t.Name, err)
	}
	for b, rec := range t.Records {
		if err := fw.Write(rec); err != nil {
			fw.Close()
			return fmt.Errorf("tables: writing %s as an Arrow IPC file: batch %d: %w", t.Name, b, err)
		}
	}
	if err := fw.Close(); err != nil {
		return fmt.Errorf("tables: writing %s as an Arrow IPC file: footer: %w", t.Name, err)
	}
	return nil
}

// WriteIPCFileFrom writes the records of rr to w as one Arrow IPC file, batch by batch (a merge of many
// parts never holds them all). It does not release rr. A reader without a schema is an error carrying
// rr.Err.
func WriteIPCFileFrom(w io.Writer, rr array.RecordReader) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("tables: writing an Arrow IPC file: %v", p)
		}
	}()
	if rr.Schema() == nil {
		return noSchema("an Arrow IPC file", rr)
	}
	fw, err := ipc.NewFileWriter(w, ipc.WithSchema(rr.Schema()))
	if err != nil {
		return fmt.Errorf("tables: writing an Arrow IPC file: %w", err)
	}
	b := 0
	for ; rr.Next(); b++ {
		if err := fw.Write(rr.RecordBatch()); err != nil {
			fw.Close()
			return fmt.Errorf("tables: writing an Arrow IPC file: batch %d: %w", b, err)
		}
	}
	if err := rr.Err(); err != nil { // the batch the reader failed (or was stopped) at, as the other writers say
		fw.Close()
		return fmt.Errorf("tables: writing an Arrow IPC file: batch %d: %w", b, err)
	}
	if err := fw.Close(); err != nil {
		return fmt.Errorf("tables: writing an Arrow IPC file: footer: %w", err)
	}
	return nil
}

// ReadIPCFile reads one Arrow IPC file into a Table whose Name is the schema's "potato.table" metadata;
// size is the file's length. mem allocates the record buffers; nil means memory.DefaultAllocator. The
// caller releases the table.
func ReadIPCFile(r io.ReaderAt, size int64, mem memory.Allocator) (t *Table, err error) {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	defer func() {
		if p := recover(); p != nil {
			t.Release()
			t, err = nil, fmt.Errorf("tables: reading Arrow IPC file: %v", p)
		}
	}()
	fr, err := ipc.NewFileReader(io.NewSectionReader(r, 0, size), ipc.WithAllocator(mem))
	if err != nil {
		return nil, fmt.Errorf("tables: reading Arrow IPC file: %w", err)
	}
	defer fr.Close()
	t = &Table{Name: TableName(fr.Schema()), Schema: fr.Schema()}
	for i := range fr.NumRecords() {
		rec, err := fr.RecordBatchAt(i) // ours to release
		if err != nil {
			t.Release()
			return nil, fmt.Errorf("tables: reading Arrow IPC file %s: batch %d: %w", t.Name, i, err)
		}
		t.Records = append(t.Records, rec)
	}
	return t, nil
}
