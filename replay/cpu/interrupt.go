package cpu

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// interrupts are the contexts registered with Backend.Interrupt. The tasks of an op look at ended, one
// atomic load, before they start, so that once a context has ended an op runs out its remaining tasks at
// once; a task skipped (or a long task stopped within itself) counts in skips. An op takes skips' value
// as it starts (opStart) and, before it returns, fails when skips moved since or a registered context has
// ended (interrupted): so an op whose tasks were skipped never returns their output, whichever context
// made them skip and whether or not that context is still registered (its release may come between).
type interrupts struct {
	mu    sync.Mutex
	next  int
	ctxs  map[int]context.Context // registered and not yet released
	cause error                   // the error of the last context that ended while registered
	ended atomic.Int32            // how many registered contexts have ended, as far as their AfterFuncs have run
	skips atomic.Uint64           // tasks skipped or stopped, ever
}

// Interrupt implements ops.Interrupter: until release, an op running or starting after ctx is done stops
// between its tasks (KDA's and MLA's long tasks also within them) and returns an error wrapping ctx.Err().
func (b *Backend) Interrupt(ctx context.Context) (release func()) {
	if ctx.Done() == nil { // context.Background and its like never end
		return func() {}
	}
	in := &b.stop
	in.mu.Lock()
	id := in.next
	in.next++
	if in.ctxs == nil {
		in.ctxs = map[int]context.Context{}
	}
	in.ctxs[id] = ctx
	in.mu.Unlock()
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		in.mu.Lock()
		in.cause = ctx.Err() // before ended counts it: a task that skips finds the cause set
		in.mu.Unlock()
		in.ended.Add(1)
		close(fired)
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			if !stop() { // the function has started, or run: take its count back once it has
				<-fired
				in.ended.Add(-1)
			}
			in.mu.Lock()
			delete(in.ctxs, id)
			in.mu.Unlock()
		})
	}
}

// halt reports whether a registered context has ended, and if so counts the task that stops for it: the
// tasks of an op, and the long ones within themselves, call it before they go on.
func (b *Backend) halt() bool {
	if b.stop.ended.Load() == 0 {
		return false
	}
	b.stop.skips.Add(1)
	return true
}

// opStart is the skip count as an op starts, for interrupted.
func (b *Backend) opStart() uint64 { return b.stop.skips.Load() }

// interrupted is nil unless the op that began at start has had tasks skipped or stopped since, or a
// registered context has ended; then it is that context's error, wrapped with the op's name. Every op that
// runs tasks calls it before returning its result. (With registrations overlapping on one backend, an
// op of one may fail for another's cancel: an error, never a partial output.)
func (b *Backend) interrupted(op string, start uint64) error {
	b.stop.mu.Lock()
	defer b.stop.mu.Unlock()
	if b.stop.skips.Load() != start {
		return fmt.Errorf("cpu: %s: interrupted: %w", op, b.stop.cause)
	}
	for _, ctx := range b.stop.ctxs {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cpu: %s: interrupted: %w", op, err)
		}
	}
	return nil
}
