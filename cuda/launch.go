package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/cuda/device"
)

// The op machinery: every op validates its arguments on the caller's goroutine, then runs one closure
// on the CUDA thread with an opCtx that allocates device memory, stages host data and launches kernels.
// Temporaries are freed (stream-ordered) when the closure returns; outputs are freed too if it fails.

// opCtx is the state of one op on the CUDA thread.
type opCtx struct {
	b      *Backend
	op     string
	detail string // with op timing on (profiling), what sets this call apart in the profile: a weight shape
	// profStart is the timing event of the op's current part (profile.go), 0 when it is not timed
	profStart uintptr
	temps     []uint64  // device buffers freed when the op ends
	outs      []*Tensor // tensors returned to the caller, freed if the op fails
	// side, when set, is the side stream the op's next launches and GEMMs go to (cuda/device/streams.go);
	// nil: the backend's stream
	side *device.SideStream
	// xsrc, when set, is the tensor a matmul's x comes from: gemmLt then reads its kept bfloat16 copy
	// (narrow.go) instead of converting x into a temporary
	xsrc *Tensor
	// deferRound lets gemmLt leave a rounded product's rounding to its reader (MatMul, deferred.go);
	// deferred reports that it did
	deferRound, deferred bool
	// steps, when set (a timing test), is called at each step boundary of a long op (expertsLt) with the
	// name of the step that just ended, so that the test can record an event there
	steps func(step string)
}

// stepDone reports the end of a step of the op to c.steps, if set.
func (c *opCtx) stepDone(step string) {
	if c.steps != nil {
		c.steps(step)
	}
}

// stream is the stream the op's launches go to now: a side stream's, or the backend's.
func (c *opCtx) stream() uintptr {
	if c.side != nil {
		return c.side.Stream
	}
	return c.b.dv.Stream
}

// run executes fn on the CUDA thread as op, then frees the temporaries (and on error the outputs) and,
// with Options.Sync, waits for the device. With op timing on (profile.go) fn is bracketed by two timing
// events on the stream, kept for OpProfile whether fn fails or not. Errors are prefixed with the op's name.
func (b *Backend) run(op string, fn func(c *opCtx) error) error {
	if b == nil || b.ex == nil {
		return fmt.Errorf("%w: %s", ErrClosed, op)
	}
	err := b.ex.Do(func() error {
		c := &opCtx{b: b, op: op}
		t0 := time.Now()
		first := len(b.prof.recs) // the op's first record, where its host gap goes
		var memBefore int64
		if b.prof.timesOps() {
			var err error
			if memBefore, err = b.prof.memStart(b.dv); err != nil {
				return fmt.Errorf("op profile: %w", err)
			}
			if c.profStart, err = b.prof.begin(b.drv, b.dv.Stream); err != nil {
				return fmt.Errorf("op profile: %w", err)
			}
		}
		err := fn(c)
		if c.profStart != 0 { // before the Sync below: the op's own work, not the wait for it
			memHigh, merr := b.prof.memEnd(b.dv) // before the temporaries go, below
			if perr := errors.Join(merr, b.prof.end(b.drv, b.dv.Stream, c.profStart, c.key())); perr != nil {
				err = errors.Join(err, fmt.Errorf("op profile: %w", perr))
			} else {
				last := &b.prof.recs[len(b.prof.recs)-1]
				last.memBefore, last.memHigh, last.host = memBefore, memHigh, time.Since(t0)
				if !b.prof.lastReturn.IsZero() && first < len(b.prof.recs) {
					b.prof.recs[first].hostGap = t0.Sub(b.prof.lastReturn)
				}
				b.prof.lastReturn = time.Now()
			}
		}
		if err == nil && b.opts.Sync {
			err = b.drv.Check("cuStreamSynchronize", bind.Call(b.drv.CuStreamSynchronize, b.dv.Stream))
		}
		var ferrs []error
		for _, p := range c.temps {
			ferrs = append(ferrs, b.dv.Free(p))
		}
		if err != nil {
			for _, t := range c.outs {
				ferrs = append(ferrs, b.dv.Free(t.ptr))
				t.ptr, t.freed = 0, true
			}
		}
		return errors.Join(err, errors.Join(ferrs...))
	})
	if err != nil {
		return fmt.Errorf("cuda: %s: %w", op, withOOM(err))
	}
	return nil
}

// temp allocates a device buffer of n bytes freed when the op ends.
func (c *opCtx) temp(n int) (uint64, error) {
	p, err := c.b.dv.Malloc(n)
	if err == nil && p != 0 {
		c.temps = append(c.temps, p)
	}
	return p, err
}

// out allocates a rows x cols float32 activation returned by the op.
func (c *opCtx) out(rows, cols int) (*Tensor, error) {
	p, err := c.b.dv.Malloc(4 * rows * cols)
	if err != nil {
		return nil, err
	}
	t := &Tensor{b: c.b, ptr: p, rows: rows, cols: cols, dt: dtF32}
	c.outs = append(c.outs, t)
	return t, nil
}

// uploadTemp copies a host slice of values to a new temporary device buffer, through the upload ring:
// ordered before the op's kernels on the stream, without waiting for the work queued before it.
func uploadTemp[T int32 | float32 | uint64](c *opCtx, v []T) (uint64, error) {
	if len(v) == 0 {
		return 0, nil
	}
	size := int(unsafe.Sizeof(v[0])) * len(v)
	p, err := c.temp(size)
	if err != nil {
		return 0, err
	}
	return p, c.b.dv.UploadAsync(c.stream(), p, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), size))
}

// download copies a device buffer of len(v) values into v.
func download[T uint16 | int32 | float32](b *Backend, v []T, src uint64) error {
	if len(v) == 0 {
		return nil
	}
	return b.dv.ToHost(bytesOf(v), src)
}

// bytesOf views a slice of values as its bytes in memory (the host is little-endian, as the device is:
// the bytes are the device's encoding of the values).
func bytesOf[T uint16 | int32 | float32](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), int(unsafe.Sizeof(v[0]))*len(v))
}

// dim3 is a grid or block shape. The sizes are ints, checked against the device's limits by launch
// (never truncated to the driver's 32-bit fields).
type dim3 struct{ x, y, z int }

func d1(x int) dim3    { return dim3{x, 1, 1} }
func d2(x, y int) dim3 { return dim3{x, y, 1} }

// Grid limits of every device this package runs on (compute capability 3.0 and later).
const (
	maxGridX  = 1<<31 - 1
	maxGridYZ = 65535
)

// Kernel argument types: device pointers are uint64, C int is int32, long long is int64, float is float32.

// launch runs kernel name with the given grid, block, dynamic shared memory and arguments, on the
// backend's stream. Arguments are marshalled into one heap buffer of 8-byte slots; the driver reads each
// with the width of the kernel's parameter (little-endian: an int32 or float32 sits in the low half).
func (c *opCtx) launch(name string, grid, block dim3, shmem int, args ...any) error {
	b := c.b
	if grid.x < 0 || grid.y < 0 || grid.z < 0 || grid.x > maxGridX || grid.y > maxGridYZ || grid.z > maxGridYZ {
		// a shape too large for this kernel's launch shape: an error, where a truncated grid would
		// silently leave work undone
		return fmt.Errorf("%w: kernel %s: grid %v past the device's limits (x at most 2^31-1, y and z at most 65535)", ErrShape, name, grid)
	}
	f, ok := b.dv.Func(name)
	if !ok {
		return fmt.Errorf("%w: no kernel %s", ErrInternal, name)
	}
	if grid.x == 0 || grid.y == 0 || grid.z == 0 {
		return nil // nothing to do
	}
	vals := make([]uint64, len(args))
	ptrs := make([]unsafe.Pointer, len(args)+1)
	for i, a := range args {
		switch v := a.(type) {
		case uint64:
			vals[i] = v
		case int32:
			vals[i] = uint64(uint32(v))
		case int64:
			vals[i] = uint64(v)
		case float32:
			vals[i] = uint64(math.Float32bits(v))
		default:
			return fmt.Errorf("%w: kernel %s argument %d has unsupported type %T", ErrInternal, name, i, a)
		}
		ptrs[i] = unsafe.Pointer(&vals[i])
	}
	rc := bind.Call(b.drv.CuLaunchKernel, f, uintptr(grid.x), uintptr(grid.y), uintptr(grid.z),
		uintptr(block.x), uintptr(block.y), uintptr(block.z), uintptr(shmem), c.stream(), uintptr(unsafe.Pointer(&ptrs[0])), 0)
	runtime.KeepAlive(vals)
	runtime.KeepAlive(ptrs)
	return b.drv.Check(fmt.Sprintf("cuLaunchKernel(%s, grid %v, block %v, shared %d)", name, grid, block, shmem), rc)
}

// Launch shapes of the grid-stride kernels (elementwise.cu, k_shortconv): 256 threads a block, at most
// maxGrid blocks (the loop covers the rest; the results do not depend on the grid).
const (
	ewThreads = 256
	maxGrid   = 1 << 20
)

// ewGrid is the number of blocks of 256 threads for n elements.
func ewGrid(n int) int { return min((n+ewThreads-1)/ewThreads, maxGrid) }

// launch1D runs a grid-stride kernel over n elements.
func (c *opCtx) launch1D(name string, n int, args ...any) error {
	if n == 0 {
		return nil
	}
	return c.launch(name, d1(ewGrid(n)), d1(ewThreads), 0, args...)
}
