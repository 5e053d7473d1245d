package cpu

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Sentinels for errors.Is; every error the backend returns wraps one of them.
var (
	// ErrShape marks an op called with shapes it cannot combine (the message names the op and the shapes).
	// It is ops.ErrShape: the checks shared by every backend (ops.CheckKDA, ...) return it too.
	ErrShape = ops.ErrShape
	// ErrArgument marks another bad argument: a foreign tensor, an id out of range, a bad MXFP4 scale.
	// It is ops.ErrArgument, like ErrShape.
	ErrArgument = ops.ErrArgument
	// ErrFreed marks the use of a tensor or expert after Free.
	ErrFreed = errors.New("cpu: use after free")
)

// Options configure a Backend.
type Options struct {
	// Precision is where activations are rounded: ops.BF16 (the reference points) or ops.FP32 (nowhere).
	Precision ops.Precision
	// Threads is the number of goroutines an op may use; 0 means runtime.GOMAXPROCS(0). Results do not
	// depend on it: every output element is computed by one goroutine in a fixed order.
	Threads int
}

// Backend is the pure-Go implementation of ops.Backend. It is safe for concurrent use as long as no tensor
// is freed while another call uses it.
type Backend struct {
	prec    ops.Precision
	bf      bool // prec == ops.BF16: round at the contract's "rounded" points
	threads int
	stop    interrupts // the contexts of Interrupt (interrupt.go)
}

var (
	_ ops.Backend     = (*Backend)(nil)
	_ ops.Interrupter = (*Backend)(nil)
)

// New returns a CPU backend.
func New(o Options) *Backend {
	t := o.Threads
	if t <= 0 {
		t = runtime.GOMAXPROCS(0)
	}
	return &Backend{prec: o.Precision, bf: o.Precision == ops.BF16, threads: t}
}

// Name returns "cpu".
func (b *Backend) Name() string { return "cpu" }

// Precision returns the rounding mode the backend was made with.
func (b *Backend) Precision() ops.Precision { return b.prec }

// Threads returns the number of goroutines an op may use.
func (b *Backend) Threads() int { return b.threads }

// r rounds x to bfloat16 in BF16 precision and returns it unchanged in FP32: every "rounded" of the ops
// contract goes through here or roundAll.
func (b *Backend) r(x float32) float32 {
	if b.bf {
		return bf16.Round(x)
	}
	return x
}

// roundAll applies r to every element.
func (b *Backend) roundAll(xs []float32) {
	if b.bf {
		bf16.RoundSlice(xs)
	}
}

// parallel runs fn(i) for every task i in [0, n) on up to b.threads goroutines, handing out tasks in
// order from a shared counter. Callers make each task write its own outputs, computed in an order that
// does not depend on which goroutine runs it, so the result is the same for any thread count. Once a
// context registered with Interrupt has ended, the tasks not yet started are skipped: the op's caller
// returns interrupted's error instead of the incomplete output.
func (b *Backend) parallel(n int, fn func(i int)) {
	b.parallelWorkers(n, func(_, i int) { fn(i) })
}

// parallelWorkers is parallel with the index of the goroutine running each task (below min(b.threads,
// n)), for tasks that reuse one scratch buffer per goroutine.
func (b *Backend) parallelWorkers(n int, fn func(worker, i int)) {
	workers := min(b.threads, n)
	if workers <= 1 {
		for i := range n {
			if b.halt() {
				return
			}
			fn(0, i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || b.halt() {
					return
				}
				fn(w, i)
			}
		})
	}
	wg.Wait()
}

// parallelRange splits [0, n) into chunks of at least grain items and runs fn on each chunk in parallel.
func (b *Backend) parallelRange(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	chunk := max(grain, (n+4*b.threads-1)/(4*b.threads)) // about 4 chunks per thread, for balance
	tasks := (n + chunk - 1) / chunk
	b.parallel(tasks, func(i int) { fn(i*chunk, min((i+1)*chunk, n)) })
}

// shapeErr builds an ErrShape error naming the op.
func shapeErr(op, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrShape, op, fmt.Sprintf(format, args...))
}

// argErr builds an ErrArgument error naming the op.
func argErr(op, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrArgument, op, fmt.Sprintf(format, args...))
}
