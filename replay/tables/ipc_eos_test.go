package tables

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/potato-k3/potato-k3/internal/arrowend"
)

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// messageEnds returns the offset at which each message of stream ends, the end-of-stream marker's
// last, as arrow-go's own message reader reads them (it reads each message exactly).
func messageEnds(t *testing.T, stream []byte) []int {
	t.Helper()
	cr := &countingReader{r: bytes.NewReader(stream)}
	mr := ipc.NewMessageReader(cr)
	defer mr.Release()
	var ends []int
	for {
		_, err := mr.Message()
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("reading the messages of a whole stream: %v", err)
		}
		ends = append(ends, cr.n)
		if err != nil {
			break
		}
	}
	if last := ends[len(ends)-1]; last != len(stream) || !bytes.Equal(stream[last-8:], []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}) {
		t.Fatalf("the stream of %d bytes ends its messages at %v, not with the 8-byte marker", len(stream), ends)
	}
	return ends
}

// legacyStream rewrites a stream into the format before Arrow 0.15: no continuation token before each
// message's length, and a bare zero length as the end-of-stream marker.
func legacyStream(t *testing.T, stream []byte) []byte {
	t.Helper()
	ends := messageEnds(t, stream)
	var out []byte
	start := 0
	for _, end := range ends[:len(ends)-1] {
		out = append(out, stream[start+4:end]...) // less the continuation token
		start = end
	}
	return append(out, 0, 0, 0, 0)
}

// writeTemp writes data to a new file name under a temporary directory and returns its path.
func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// sameTable is "" when got holds want's schema (metadata included) and batches.
func sameTable(want, got *Table) string {
	switch {
	case got.Name != want.Name:
		return fmt.Sprintf("name -%q +%q", want.Name, got.Name)
	case !got.Schema.Equal(want.Schema) || !got.Schema.Metadata().Equal(want.Schema.Metadata()):
		return fmt.Sprintf("schema\n-%v\n+%v", want.Schema, got.Schema)
	case len(got.Records) != len(want.Records):
		return fmt.Sprintf("-%d batches +%d", len(want.Records), len(got.Records))
	}
	for i := range want.Records {
		if !array.RecordEqual(want.Records[i], got.Records[i]) {
			return fmt.Sprintf("batch %d differs", i)
		}
	}
	return ""
}

// A stream cut at any message boundary is what arrow-go's reader takes for a whole, shorter stream: it
// is refused for the end-of-stream marker it lacks, with an error that names the file. One cut inside a
// message is refused as cut short. The whole stream reads back equal, in either form of the marker.
func TestReadFileTruncatedStream(t *testing.T) {
	mem := checkedAlloc(t)
	in := makeResults(5, 4, spec{seq: 1, tokens: 7, conv: true}, spec{seq: 2, tokens: 5})
	set, err := Build(in, Options{Allocator: mem, BatchRows: 3, Piece: handPiece})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Release()
	for _, tab := range set.Tables() {
		var buf bytes.Buffer
		if err := WriteIPC(&buf, tab.Records...); err != nil {
			t.Fatal(err)
		}
		whole := buf.Bytes()
		ends := messageEnds(t, whole)
		if len(ends) != len(tab.Records)+2 { // the schema, the batches, the marker
			t.Fatalf("%s: %d messages in the stream of %d batches", tab.Name, len(ends), len(tab.Records))
		}
		type cut struct {
			name string
			at   int
			want string // after the path; "" for a stream read whole
		}
		var cuts []cut
		for i, end := range ends[:len(ends)-1] { // every boundary before the marker's end
			cuts = append(cuts, cut{fmt.Sprintf("after the schema and %d batches", i), end,
				fmt.Sprintf(" ends without Arrow's end-of-stream marker, after its schema (table %s) and %s (%d bytes)", tab.Name, arrowend.Batches(i), end)})
		}
		cuts = append(cuts,
			cut{"half the marker", len(whole) - 4, ": an Arrow IPC stream cut short ("},
			cut{"all but the marker's last byte", len(whole) - 1, ": an Arrow IPC stream cut short ("},
			cut{"inside the schema", ends[0] / 2, ": an Arrow IPC stream cut short ("},
			cut{"a batch's first byte", ends[1] + 1, ": an Arrow IPC stream cut short ("},
			cut{"inside the first batch", (ends[1] + ends[2]) / 2, ": an Arrow IPC stream cut short ("},
			cut{"inside the last batch", ends[len(ends)-2] - 3, ": an Arrow IPC stream cut short ("},
			cut{"whole", len(whole), ""},
		)
		for _, ext := range []string{".arrows", ".arrow"} { // a .arrow file holding a stream is read as one
			for _, c := range cuts {
				t.Run(tab.Name+ext+"/"+c.name, func(t *testing.T) {
					path := writeTemp(t, "x"+ext, whole[:c.at])
					got, err := ReadFile(path, mem)
					if c.want == "" {
						if err != nil {
							t.Fatal(err)
						}
						defer got.Release()
						if d := sameTable(tab, got); d != "" {
							t.Error(d)
						}
						return
					}
					if err == nil {
						got.Release()
						t.Fatalf("read %d rows of %d bytes cut at %d, want an error", got.NumRows(), len(whole), c.at)
					}
					if want := path + c.want; !strings.Contains(err.Error(), want) {
						t.Errorf("-want …%s… +got %v", want, err)
					}
					if marker := strings.Contains(c.want, "marker"); marker != errors.Is(err, ErrNoEndMarker) {
						t.Errorf("errors.Is(err, ErrNoEndMarker) = %v, want %v: %v", !marker, marker, err)
					}
				})
			}
		}
	}
}

// ReadIPC accepts the marker in both its forms and a stream of no batches that has it, and refuses a
// stream without it however its source hands out the bytes (all at once, a byte at a time, the last
// bytes with io.EOF). A batch whose last 8 bytes equal the marker, cut after it, is refused too: the
// check is that the reader stopped short of its source's end, not the bytes alone.
func TestReadIPCEndMarker(t *testing.T) {
	mem := checkedAlloc(t)
	set := handSet(t, mem)
	tokens := set.Tokens
	var buf bytes.Buffer
	if err := WriteIPC(&buf, tokens.Records...); err != nil {
		t.Fatal(err)
	}
	whole := buf.Bytes()
	var emptyBuf bytes.Buffer
	if err := WriteTableIPC(&emptyBuf, &Table{Name: TokensTable, Schema: tokens.Schema}); err != nil {
		t.Fatal(err)
	}
	empty := emptyBuf.Bytes()

	// One int64 column of 2^32-1: its body is the 8 bytes ff ff ff ff 00 00 00 00, the marker's.
	schema := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewRecordBuilder(mem, schema)
	b.Field(0).(*array.Int64Builder).Append(1<<32 - 1)
	rec := b.NewRecordBatch()
	b.Release()
	defer rec.Release()
	var mimicBuf bytes.Buffer
	if err := WriteIPC(&mimicBuf, rec); err != nil {
		t.Fatal(err)
	}
	mimic := mimicBuf.Bytes()
	mimicCut := mimic[:len(mimic)-8]
	if !bytes.Equal(mimicCut[len(mimicCut)-8:], mimic[len(mimic)-8:]) {
		t.Fatalf("the batch ends % x, not the marker's bytes", mimicCut[len(mimicCut)-8:])
	}

	// A dictionary column: the reader expects the dictionary after the schema.
	dictType := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	dschema := arrow.NewSchema([]arrow.Field{{Name: "d", Type: dictType}}, nil)
	db := array.NewRecordBuilder(mem, dschema)
	db.Field(0).(*array.BinaryDictionaryBuilder).AppendString("a")
	drec := db.NewRecordBatch()
	db.Release()
	defer drec.Release()
	var dictBuf bytes.Buffer
	if err := WriteIPC(&dictBuf, drec); err != nil {
		t.Fatal(err)
	}
	dict := dictBuf.Bytes()
	dictEnds := messageEnds(t, dict) // the schema, the dictionary, the batch, the marker

	for _, tt := range []struct {
		name    string
		data    []byte
		batches int // -1: refused for its missing marker
	}{
		{"whole", whole, len(tokens.Records)},
		{"the marker before Arrow 0.15", legacyStream(t, whole), len(tokens.Records)},
		{"bytes after the marker", append(bytes.Clone(whole), 1, 2, 3), len(tokens.Records)},
		{"no batches", empty, 0},
		{"no batches, the marker before Arrow 0.15", legacyStream(t, empty), 0},
		{"the schema alone", empty[:len(empty)-8], -1},
		{"the schema alone before Arrow 0.15", legacyStream(t, empty)[:len(legacyStream(t, empty))-4], -1},
		{"no marker", whole[:len(whole)-8], -1},
		{"no marker before Arrow 0.15", legacyStream(t, whole)[:len(legacyStream(t, whole))-4], -1},
		{"a batch ending in the marker's bytes, whole", mimic, 1},
		{"a batch ending in the marker's bytes, no marker", mimicCut, -1},
		{"a dictionary, whole", dict, 1},
		{"a dictionary, the schema alone", dict[:dictEnds[0]], -1},
		{"a dictionary, no batch", dict[:dictEnds[1]], -1},
	} {
		for _, rd := range []struct {
			name string
			wrap func([]byte) io.Reader
		}{
			{"whole reads", func(d []byte) io.Reader { return bytes.NewReader(d) }},
			{"byte by byte", func(d []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(d)) }},
			{"last bytes with io.EOF", func(d []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(d)) }},
		} {
			t.Run(tt.name+"/"+rd.name, func(t *testing.T) {
				got, err := ReadIPC(rd.wrap(tt.data), mem)
				if tt.batches < 0 {
					if err == nil {
						got.Release()
						t.Fatalf("read %d batches, want ErrNoEndMarker", len(got.Records))
					}
					if !errors.Is(err, ErrNoEndMarker) || !strings.Contains(err.Error(), "the stream ends without Arrow's end-of-stream marker") {
						t.Errorf("-want ErrNoEndMarker, …the stream ends without Arrow's end-of-stream marker… +got %v", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				defer got.Release()
				if len(got.Records) != tt.batches {
					t.Errorf("-want %d batches +got %d", tt.batches, len(got.Records))
				}
				if tt.batches == len(tokens.Records) && got.Name == TokensTable {
					if d := sameTable(tokens, got); d != "" {
						t.Error(d)
					}
				}
			})
		}
	}
}
