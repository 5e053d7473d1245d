package arrowend

import (
	"bytes"
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// stream is an Arrow IPC stream of batches of one int64 column.
func stream(t *testing.T, batches int) []byte {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil)
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(schema))
	for i := range batches {
		b := array.NewInt64Builder(memory.DefaultAllocator)
		b.AppendValues([]int64{int64(i), 1<<32 - 1}, nil) // a last value spelling the marker's bytes
		col := b.NewArray()
		rec := array.NewRecordBatch(schema, []arrow.Array{col}, 2)
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		col.Release()
		b.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestReadAll: a whole stream reads with every batch; the same stream without its 8-byte marker is a
// CutError that counts what was read; bytes that are no stream are an error, not a panic.
func TestReadAll(t *testing.T) {
	whole := stream(t, 3)
	schema, batches, err := ReadAll(bytes.NewReader(whole))
	if err != nil || schema == nil || len(batches) != 3 {
		t.Fatalf("whole stream: %d batches, %v", len(batches), err)
	}
	for _, b := range batches {
		b.Release()
	}
	_, batches, err = ReadAll(bytes.NewReader(whole[:len(whole)-8]))
	var cut *CutError
	if !errors.As(err, &cut) || cut.Batches != 3 || cut.Bytes != int64(len(whole)-8) || cut.Schema == nil || batches != nil {
		t.Fatalf("without the marker: %v (%+v), %d batches", err, cut, len(batches))
	}
	if _, _, err := ReadAll(bytes.NewReader([]byte("not an arrow stream at all, only text"))); err == nil {
		t.Fatal("text read as a stream")
	}
	if got := Batches(1) + ", " + Batches(2); got != "1 batch, 2 batches" {
		t.Errorf("Batches: %q", got)
	}
}
