package cpu

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// interrupts are the contexts registered with Backend.Interrupt. The tasks of an op look at ended, one
// atomic load, before they start, so that once a context has ended an op runs out its remaining tasks at
// once; interrupted, which every such op calls before it returns, then asks the contexts themselves (ended
// is set by context.AfterFunc, on a goroutine of its own, a moment after the context ends).
type interrupts struct {
	mu    sync.Mutex
	next  int
	ctxs  map[int]context.Context // registered and not yet released
	ended atomic.Int32            // how many of them have ended, as far as their AfterFuncs have run
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

// stopping reports whether a registered context has ended: the tasks of an op check it before they run.
func (b *Backend) stopping() bool { return b.stop.ended.Load() > 0 }

// interrupted is nil unless a registered context has ended; then it is that context's error, wrapped
// with the op's name. Every op that runs tasks calls it before returning its result, so an op whose tasks
// were skipped never returns their output.
func (b *Backend) interrupted(op string) error {
	b.stop.mu.Lock()
	defer b.stop.mu.Unlock()
	for _, ctx := range b.stop.ctxs {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cpu: %s: interrupted: %w", op, err)
		}
	}
	return nil
}
