package kernel

import (
	"context"
	"fmt"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
)

// flights is the in-process half of ReplayCached's one-submission rule: the calls of one client that ask
// for the same results entry at the same time (goroutines of one cell) make one flight, whose first call
// (the leader) replays while the others wait for its outcome. Across clients and processes the entry's
// claim file does the same (claim.go). The zero value is ready.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight // by entry directory
}

// flight is one leader's call as its waiters see it. The fields below done are set by land, under
// flights.mu, before done is closed.
type flight struct {
	done    chan struct{} // closed when the leader has its outcome
	waiters int           // waiters that have not yet taken their share (under flights.mu)
	// res is the leader's result for the waiters, its tables retained once for all of them and released
	// by the last; nil when the leader failed or nobody waited.
	res *Result
	err error // the leader's error
	// ctxEnded: the leader's error is the end of its own context, which says nothing of the request:
	// its waiters carry on (and find the job it submitted, which goes on in the engine).
	ctxEnded bool
}

// join makes the caller the leader of entry's flight (leader true: it must call land) or a waiter of the
// flight under way (it must call wait).
func (fs *flights) join(entry string) (f *flight, leader bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.m[entry]; f != nil {
		f.waiters++
		return f, false
	}
	if fs.m == nil {
		fs.m = map[string]*flight{}
	}
	f = &flight{done: make(chan struct{})}
	fs.m[entry] = f
	return f, true
}

// land ends the leader's flight with its outcome. The leader keeps r; the waiters get tables of their
// own (shared records, retained), so that each Releases its result independently.
func (fs *flights) land(entry string, f *flight, r *Result, err error, ctxEnded bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	delete(fs.m, entry)
	f.err, f.ctxEnded = err, ctxEnded
	if r != nil && err == nil && f.waiters > 0 {
		f.res = shareResult(r)
	}
	close(f.done)
}

// wait waits for f's leader and takes this waiter's share of the outcome: the leader's result (a
// Result of its own), or the leader's error, or carryOn when the leader stopped for its own context
// (or returned nothing) and this call must go on by itself. When ctx ends first, it returns ctx's error
// and the leader carries on.
func (fs *flights) wait(ctx context.Context, f *flight) (r *Result, carryOn bool, err error) {
	var ended error
	select {
	case <-f.done:
	case <-ctx.Done():
		ended = ctx.Err()
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f.waiters--
	if ended == nil && f.res != nil {
		r = shareResult(f.res)
	}
	if f.waiters == 0 && f.res != nil { // f.res is set only once done is closed, so no waiter comes after
		f.res.Release()
		f.res = nil
	}
	switch {
	case ended != nil:
		return nil, false, fmt.Errorf("kernel: ReplayCached: waiting for the same request's call under way in this process (it goes on): %w", ended)
	case r != nil:
		return r, false, nil
	case f.err != nil && !f.ctxEnded:
		return nil, false, f.err
	}
	return nil, true, nil
}

// shareResult is a Result with r's status and r's tables, each retained: releasing either leaves the
// other's tables intact.
func shareResult(r *Result) *Result {
	s := &Result{Status: r.Status, FromCache: r.FromCache, tables: make(map[string]arrow.RecordBatch, len(r.tables))}
	for name, rec := range r.tables {
		rec.Retain()
		s.tables[name] = rec
	}
	return s
}
