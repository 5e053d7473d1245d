package device

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
)

// Thread runs closures one at a time on a single goroutine locked to its OS thread, the thread on which a
// CUDA context is current (a CUDA context is per thread). Every CUDA call of a backend goes through it; a
// panic inside a closure is recovered and returned as an error wrapping ErrInternal, so none crosses a
// package boundary.
type Thread struct {
	jobs   chan job
	mu     sync.Mutex // guards closed against a send on a closed channel
	closed bool
	done   chan struct{}
}

// Sentinels for errors.Is.
var (
	// ErrClosed marks a call on a closed Thread (and so on a closed backend).
	ErrClosed = errors.New("cuda: backend closed")
	// ErrInternal marks a bug: a recovered panic on the CUDA thread, or a broken invariant.
	ErrInternal = errors.New("cuda: internal error")
)

type job struct {
	fn   func() error
	errc chan error
}

// NewThread starts the goroutine and runs init on it first; if init fails the goroutine exits and the
// error is returned.
func NewThread(init func() error) (*Thread, error) {
	e := &Thread{jobs: make(chan job), done: make(chan struct{})}
	ready := make(chan error, 1)
	go e.loop(init, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Thread) loop(init func() error, ready chan<- error) {
	runtime.LockOSThread() // never unlocked: the thread dies with the goroutine, context and all
	defer close(e.done)
	if err := protect(init); err != nil {
		ready <- err
		return
	}
	ready <- nil
	for j := range e.jobs {
		j.errc <- protect(j.fn)
	}
}

// protect runs fn and turns a panic into an error carrying the stack.
func protect(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: panic on the CUDA thread: %v\n%s", ErrInternal, p, debug.Stack())
		}
	}()
	return fn()
}

// Do runs fn on the thread and returns its error. After Close it returns ErrClosed.
func (e *Thread) Do(fn func() error) error {
	errc := make(chan error, 1)
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	e.jobs <- job{fn, errc}
	e.mu.Unlock()
	return <-errc
}

// Close runs last on the thread, then stops the goroutine and waits for it. A second Close is a no-op.
func (e *Thread) Close(last func() error) error {
	err := e.Do(last)
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.jobs)
	e.mu.Unlock()
	<-e.done
	if err == ErrClosed {
		return nil
	}
	return err
}
