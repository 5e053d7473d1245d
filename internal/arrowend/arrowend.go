// Package arrowend reads an Arrow IPC stream to its end-of-stream marker (ReadAll), telling a stream that
// ended on the marker from one cut short between two messages (Reader). The format calls the marker optional, and arrow-go's stream reader takes a clean
// end of its input between messages as the end of the stream, so a stream cut there (a writer killed
// mid-table, a full disk, a copy or a connection cut short) would read as a whole table of fewer batches,
// or of none. Every stream writer this project accepts writes the marker when it closes a stream (arrow-go's
// ipc.Writer.Close, Arrow C++ and so pyarrow, arrow-rs and polars on finish), so a stream without it was
// never finished.
package arrowend

import (
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
)

// Reader passes reads through to the stream's source and keeps the last 8 bytes read and whether the
// source reported its end. arrow-go's message reader reads each message with io.ReadFull, exactly its
// length, and stops on the marker without reading past it (ipc/message.go, messageReader.Message: 4
// bytes, then 4 more after the continuation token; a zero in either place is the end). So a whole stream
// leaves the source short of its end with the marker as the last bytes read, while one cut between
// messages makes the reader ask for the next message's first 4 bytes and find the end of the source
// instead. The bytes alone would not do: a batch's body most often ends in zero padding, and can end in
// the marker's very bytes (an int64 column whose last value is 2^32-1).
type Reader struct {
	r    io.Reader
	tail [8]byte
	n    int64 // bytes read
	eof  bool  // a read found the source at its end
}

// NewReader returns a Reader over the stream's source r: hand it to ipc.NewReader in r's place.
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

// Read reads from the source.
func (e *Reader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if n >= len(e.tail) {
		copy(e.tail[:], p[n-len(e.tail):n])
	} else if n > 0 {
		copy(e.tail[:], e.tail[n:])
		copy(e.tail[len(e.tail)-n:], p[:n])
	}
	e.n += int64(n)
	// A source may return its last bytes with io.EOF (io.ReadFull then succeeds): the end counts only
	// when a read finds nothing more, as it does when the reader asks past a stream's last message.
	if n == 0 && errors.Is(err, io.EOF) {
		e.eof = true
	}
	return n, err
}

// Ended reports, once the IPC reader has stopped without an error of its own, whether it stopped on the
// end-of-stream marker: the source was not found at its end, and the last bytes read are the marker's,
// 0xFFFFFFFF then a zero int32 or (before Arrow 0.15, when messages had no continuation token) a bare zero
// int32; both end in four zero bytes. The first test decides (see Reader); the second only confirms it.
func (e *Reader) Ended() bool {
	return !e.eof && e.n >= 4 && [4]byte(e.tail[4:]) == [4]byte{}
}

// CutError is ReadAll's error for a stream that ends without its end-of-stream marker.
type CutError struct {
	Schema  *arrow.Schema // the stream's schema, as read
	Batches int           // the batches read before the end of the source
	Bytes   int64         // the bytes read
}

func (e *CutError) Error() string {
	return fmt.Sprintf("the Arrow IPC stream ends without its end-of-stream marker, after its schema and %s (%d bytes): it was cut short",
		Batches(e.Batches), e.Bytes)
}

// ReadAll reads an Arrow IPC stream from r to its end-of-stream marker and returns its schema and
// batches, each retained: the caller releases them. A stream that ends without the marker is a
// *CutError; an error of the IPC reader (a damaged message, a stream cut inside one) comes wrapped with
// the number of the batch it stopped at, and a panic of the reader on damaged bytes as an error. On an
// error the batches read are released, and the schema is returned where it was read.
func ReadAll(r io.Reader, opts ...ipc.Option) (schema *arrow.Schema, batches []arrow.RecordBatch, err error) {
	release := func() {
		for _, b := range batches {
			b.Release()
		}
		batches = nil
	}
	defer func() {
		if p := recover(); p != nil {
			release()
			err = fmt.Errorf("batch %d: the Arrow IPC reader failed on the stream's bytes: %v", len(batches), p)
		}
	}()
	er := NewReader(r)
	ir, err := ipc.NewReader(er, opts...)
	if err != nil {
		return nil, nil, err
	}
	defer ir.Release()
	schema = ir.Schema()
	for ir.Next() {
		rec := ir.RecordBatch()
		rec.Retain() // the reader releases its batch on the next call
		batches = append(batches, rec)
	}
	// A clean end of the input reads as io.EOF (or none), as the marker does; Ended tells them apart.
	if err := ir.Err(); err != nil && !errors.Is(err, io.EOF) {
		n := len(batches)
		release()
		return schema, nil, fmt.Errorf("batch %d: %w", n, err)
	}
	if !er.Ended() {
		n := len(batches)
		release()
		return schema, nil, &CutError{Schema: schema, Batches: n, Bytes: er.Bytes()}
	}
	return schema, batches, nil
}

// Batches says n batches in words, for the messages about a stream cut short: "1 batch", "2 batches".
func Batches(n int) string {
	if n == 1 {
		return "1 batch"
	}
	return fmt.Sprintf("%d batches", n)
}

// Bytes is how many bytes were read from the source.
func (e *Reader) Bytes() int64 { return e.n }
