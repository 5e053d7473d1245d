package ops

import "context"

// Interrupter is an optional interface of a Backend whose single op can run long enough that a cancel
// should not wait for it: the CPU backend computes in the calling process, and one op of a long sequence
// takes minutes (MLA over 1,048,576 tokens of one sequence, hours), where the engine looks at its context
// only between sublayers. A device backend's ops are queued kernels of milliseconds and need none of this.
//
// Contract: from the call to Interrupt until release is called, every op that computes (the backend
// documents which: the CPU's copies, uploads and downloads of float32 values do not) and is running, or
// starts, after ctx is done returns an error wrapping ctx.Err() (errors.Is(err, context.Canceled) holds
// for a cancel) instead of its result; an op that returned without an error returned its full result. An
// op may stop early, leaving its outputs undefined (an ExpertsAccumulate's acc included). Registrations
// may overlap: an op stops when any context registered and not yet released is done, so engines sharing
// one backend share its interruptions, and an op of one may fail for another's cancel (an engine runs one
// wave at a time; the ones this project opens each make their own backend). release may be called more
// than once.
type Interrupter interface {
	Interrupt(ctx context.Context) (release func())
}

// Interrupt registers ctx with b where b implements Interrupter, and otherwise does nothing; the release
// function it returns is never nil.
func Interrupt(b Backend, ctx context.Context) (release func()) {
	if in, ok := b.(Interrupter); ok {
		return in.Interrupt(ctx)
	}
	return func() {}
}
