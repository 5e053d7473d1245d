package tables

import (
	"bytes"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
)

// TestIPCReadByArrow reads WriteIPC's output with arrow-go's own ipc.NewReader, as any Arrow IPC stream
// reader would: the schema with its metadata, then batches equal to the ones written.
func TestIPCReadByArrow(t *testing.T) {
	mem := checkedAlloc(t)
	in := makeResults(8, 4, spec{seq: 1, tokens: 6, conv: true}, spec{seq: 2, tokens: 3})
	set, err := Build(in, Options{Allocator: mem, BatchRows: 4, Metadata: map[string]string{MetaEngine: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Release()
	for _, tab := range set.Tables() {
		var buf bytes.Buffer
		if err := WriteIPC(&buf, tab.Records...); err != nil {
			t.Fatal(err)
		}
		// An IPC stream starts with a continuation marker; the IPC *file* format would start with "ARROW1".
		if !bytes.HasPrefix(buf.Bytes(), []byte{0xff, 0xff, 0xff, 0xff}) {
			t.Errorf("%s: stream starts % x, want the continuation marker", tab.Name, buf.Bytes()[:8])
		}
		rdr, err := ipc.NewReader(&buf, ipc.WithAllocator(mem))
		if err != nil {
			t.Fatal(err)
		}
		if !rdr.Schema().Equal(tab.Schema) || rdr.Schema().Metadata().ToMap()[MetaEngine] != "test" ||
			TableName(rdr.Schema()) != tab.Name {
			t.Errorf("%s: schema read back:\n%v", tab.Name, rdr.Schema())
		}
		n := 0
		for rdr.Next() {
			if n >= len(tab.Records) || !array.RecordEqual(rdr.RecordBatch(), tab.Records[n]) {
				t.Errorf("%s: batch %d differs", tab.Name, n)
			}
			n++
		}
		if rdr.Err() != nil || n != len(tab.Records) {
			t.Errorf("%s: read %d batches (err %v), want %d", tab.Name, n, rdr.Err(), len(tab.Records))
		}
		rdr.Release()
	}
}

// TestIPCEmptyTable checks that a table of no rows is a valid stream holding its schema.
func TestIPCEmptyTable(t *testing.T) {
	mem := checkedAlloc(t)
	set, err := Build(nil, Options{Allocator: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Release()
	var buf bytes.Buffer
	if err := WriteTableIPC(&buf, set.Tokens); err != nil {
		t.Fatal(err)
	}
	back, err := ReadIPC(&buf, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Release()
	if back.Name != TokensTable || back.NumRows() != 0 || !back.Schema.Equal(set.Tokens.Schema) {
		t.Errorf("read back %s with %d rows, schema %v", back.Name, back.NumRows(), back.Schema)
	}
}

// TestIPCErrors checks the refusals of WriteIPC and ReadIPC.
func TestIPCErrors(t *testing.T) {
	mem := checkedAlloc(t)
	set := handSet(t, mem)
	var good bytes.Buffer
	if err := WriteIPC(&good, set.Tokens.Records...); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		run  func() error
		want string
	}{
		{"no records", func() error { return WriteIPC(&bytes.Buffer{}) }, "no records"},
		{"two schemas", func() error {
			return WriteIPC(&bytes.Buffer{}, set.Tokens.Records[0], set.Lens.Records[0])
		}, "tables: WriteIPC"},
		{"not a stream", func() error {
			_, err := ReadIPC(strings.NewReader("PAR1 not arrow at all"), mem)
			return err
		}, "tables: reading Arrow IPC stream"},
		{"cut short", func() error {
			tab, err := ReadIPC(bytes.NewReader(good.Bytes()[:good.Len()-40]), mem)
			tab.Release()
			return err
		}, "tables: reading Arrow IPC stream tokens: batch 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error: -want containing %q +got %v", tt.want, err)
			}
		})
	}
}
