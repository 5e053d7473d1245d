package tables

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
)

// cancelAfter is a RecordReader that cancels its context as soon as it has yielded its first batches, as
// a Ctrl-C arriving while the last of them is written does, and counts the calls for more after that.
type cancelAfter struct {
	array.RecordReader
	first     int
	cancel    context.CancelFunc
	n         int // batches yielded
	cancelled bool
	after     int // Next calls once cancelled: the writer should make none
}

func (r *cancelAfter) Next() bool {
	if r.cancelled {
		r.after++
	}
	ok := r.RecordReader.Next()
	if ok {
		r.n++
		if r.n == r.first {
			r.cancel()
			r.cancelled = true
		}
	}
	return ok
}

// countdown is a context that reports itself cancelled from its k-th Err call on: it stops a write at
// each of the places where the writers look at ctx in turn, with no reader of the test's in between
// (WriteSet reads its held tables itself).
type countdown struct {
	context.Context // Background: Done, Deadline and Value of a context that is never cancelled
	k, calls        atomic.Int64
}

func (c *countdown) Err() error {
	if c.calls.Add(1) >= c.k.Load() {
		return context.Canceled
	}
	return nil
}

// TestWriteSetCancelled checks that a set write stops between record batches once its context is
// cancelled, returns an error wrapping context.Canceled, and leaves the directory as it was: an earlier
// run's set intact, no new table file, no staging folder. WriteSetFrom is cancelled by its reader after
// the first batch and must ask for no more than the one batch being written when the cancel came;
// WriteSet is cancelled at each of its checks in turn (before the staging folder, before each table,
// between batches, before the publish) until one comes too late to stop it, which must then publish the
// whole set.
func TestWriteSetCancelled(t *testing.T) {
	mem := checkedAlloc(t)
	build := func(id string) *Set {
		// 3-row batches: the tokens table of 8 positions is three batches, so the cancel falls inside it.
		set, err := Build(makeResults(11, 4, spec{seq: 1, tokens: 5, conv: true}, spec{seq: 2, tokens: 3}),
			Options{Allocator: mem, BatchRows: 3, Metadata: map[string]string{MetaResultSet: id}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(set.Release)
		return set
	}
	earlier, set := build("aaaa"), build("bbbb")
	if len(set.Tokens.Records) < 2 {
		t.Fatalf("the tokens table has %d batches: the test needs two at least", len(set.Tokens.Records))
	}
	for _, ext := range []string{".arrow", ".arrows", ".parquet"} {
		for _, prior := range []bool{false, true} {
			name := ext + "/into an empty directory"
			if prior {
				name = ext + "/over an earlier set"
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "res"+ext)
				if prior {
					if _, err := WriteSet(t.Context(), path, earlier); err != nil {
						t.Fatal(err)
					}
				}
				before := dirContents(t, dir)
				unchanged := func(t *testing.T, how string, err error) {
					t.Helper()
					if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "nothing was replaced") {
						t.Errorf("%s: -want an error wrapping context.Canceled, nothing replaced +got %v", how, err)
					}
					if d := cmpContents(before, dirContents(t, dir)); d != "" {
						t.Errorf("%s: a cancelled write changed the directory (no file or staging folder may be left): %s", how, d)
					}
				}

				t.Run("WriteSetFrom", func(t *testing.T) {
					ctx, cancel := context.WithCancel(t.Context())
					defer cancel()
					var srcs []TableSource
					var tokens *cancelAfter
					for _, tb := range set.Tables() {
						rr, err := tb.Reader()
						if err != nil {
							t.Fatal(err)
						}
						defer rr.Release()
						src := TableSource{Name: tb.Name, Reader: rr}
						if tb.Name == TokensTable {
							tokens = &cancelAfter{RecordReader: rr, first: 1, cancel: cancel}
							src.Reader = tokens
						}
						srcs = append(srcs, src)
					}
					written, err := WriteSetFrom(ctx, path, srcs)
					if written != nil {
						t.Errorf("a cancelled write returned paths %v", written)
					}
					unchanged(t, "cancelled after the first batch", err)
					if tokens.n != 1 || tokens.after != 0 {
						t.Errorf("the tokens reader yielded %d batches and was asked for %d more after the cancel: -want 1 and 0", tokens.n, tokens.after)
					}
				})

				t.Run("WriteSet", func(t *testing.T) {
					midway := false // a cancel that stopped the write between two batches of one table
					for k := int64(1); ; k++ {
						ctx := &countdown{Context: context.Background()}
						ctx.k.Store(k)
						written, err := WriteSet(ctx, path, set)
						if err == nil {
							// Too late to stop: the set is published whole, after every check said go on.
							if k < int64(len(set.Tokens.Records))+2 || len(written) != len(set.Tables()) {
								t.Errorf("check %d: the write went through with %v: too few checks before it", k, written)
							}
							back, err := ReadSet(path, mem)
							if err != nil {
								t.Fatal(err)
							}
							if got := metaValue(back.Tokens.Schema, MetaResultSet); got != "bbbb" {
								t.Errorf("the set written after the last check: -want bbbb +got %s", got)
							}
							back.Release()
							break
						}
						unchanged(t, fmt.Sprintf("cancelled at check %d", k), err)
						midway = midway || strings.Contains(err.Error(), "batch 1") || strings.Contains(err.Error(), "batch 2")
						if k > 1000 {
							t.Fatal("no end to the checks")
						}
					}
					if !midway {
						t.Error("no cancel stopped a table between its batches")
					}
				})
			})
		}
	}
}

// TestWriteSetCause checks that the cause given to a context's cancel is in the error beside
// context.Canceled, so that a server stopping a write for its shutdown can tell it from a client's
// cancel.
func TestWriteSetCause(t *testing.T) {
	mem := checkedAlloc(t)
	set, err := Build(makeResults(3, 4, spec{seq: 1, tokens: 4}), Options{Allocator: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Release()
	shutdown := errors.New("the server is shutting down")
	for _, tt := range []struct {
		name string
		ctx  func() context.Context
		want []error
	}{
		{"cancel with a cause", func() context.Context {
			ctx, cancel := context.WithCancelCause(t.Context())
			cancel(shutdown)
			return ctx
		}, []error{context.Canceled, shutdown}},
		{"deadline", func() context.Context {
			ctx, cancel := context.WithDeadline(t.Context(), time.Unix(1, 0))
			t.Cleanup(cancel)
			return ctx
		}, []error{context.DeadlineExceeded}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := WriteSet(tt.ctx(), filepath.Join(dir, "r.parquet"), set)
			for _, want := range tt.want {
				if !errors.Is(err, want) {
					t.Errorf("-want an error wrapping %v +got %v", want, err)
				}
			}
			if d := cmpContents(map[string]string{}, dirContents(t, dir)); d != "" {
				t.Errorf("a write cancelled before it began left %s", d)
			}
		})
	}
}
