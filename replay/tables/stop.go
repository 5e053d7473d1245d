package tables

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow/array"
)

// stopped is nil while ctx runs, and once it is done an error that wraps ctx.Err() (so that
// errors.Is(err, context.Canceled) holds for every writer's error) and, where the canceller gave one, the
// cause (context.Cause): a server that stops a write for its shutdown can tell that from a client's
// cancel.
func stopped(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("stopped: %w (%w)", err, cause)
	}
	return fmt.Errorf("stopped: %w", err)
}

// ctxReader is a RecordReader that ends before its next batch once ctx is done, with stopped's error as
// its Err: the set writers' check between record batches. A writer sees it as any reader that failed
// (rr.Err after the loop), so every format stops the same way, and the batch being built when the
// cancel came is the last one asked for. It does not own the reader it wraps: Release passes through to
// it, and the set writers never call it.
type ctxReader struct {
	array.RecordReader
	ctx context.Context
	err error
}

// Next yields the wrapped reader's next batch, unless ctx is done.
func (r *ctxReader) Next() bool {
	if r.err == nil {
		r.err = stopped(r.ctx)
	}
	return r.err == nil && r.RecordReader.Next()
}

// Err is stopped's error once ctx stopped the reader, else the wrapped reader's.
func (r *ctxReader) Err() error {
	if r.err != nil {
		return r.err
	}
	return r.RecordReader.Err()
}
