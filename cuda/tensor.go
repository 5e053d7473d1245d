package cuda

import (
	"errors"
	"fmt"
	"math"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Storage types of a Tensor's device buffer.
const (
	dtF32  int32 = 0 // float32: every activation, and F32 weights
	dtBF16 int32 = 1 // raw bfloat16: BF16 weights, uploaded as stored
)

// Tensor is the CUDA backend's ops.Tensor: rows x cols values in device memory, row-major. Activations are
// float32 (bfloat16-representable in BF16 precision); weights keep their checkpoint type (bfloat16 or
// float32), decoded by the kernels that read them.
type Tensor struct {
	b          *Backend
	ptr        uint64 // device address (0 for an empty tensor)
	rows, cols int
	dt         int32
	wide       uint64 // a float32 copy of a bfloat16 weight, made on first use by an op that needs one
	// narrow is a bfloat16 copy of a float32 activation (rows narrowLd elements apart), made by the first
	// cuBLASLt matmul that reads it as x in BF16 precision and reused by the next ones (narrow.go)
	narrow   uint64
	narrowLd int
	// narrowOnly: the values live in narrow alone (rows cols apart); ptr is allocated but not written.
	// A norm or MulSigmoid whose output only matmuls read writes it so (narrow.go); widen fills ptr.
	narrowOnly bool
	// unrounded: the values are a MatMul's float32 sums whose rounding to bfloat16 was left to the reader
	// (deferred.go); f32 rounds them in place, raw leaves them to a kernel that rounds as it loads
	unrounded bool
	freed     bool
}

// Rows is the number of rows.
func (t *Tensor) Rows() int { return t.rows }

// Cols is the number of columns.
func (t *Tensor) Cols() int { return t.cols }

// String describes the shape, for error messages.
func (t *Tensor) String() string {
	if t.dt == dtBF16 {
		return fmt.Sprintf("%dx%d bf16", t.rows, t.cols)
	}
	return fmt.Sprintf("%dx%d", t.rows, t.cols)
}

func (t *Tensor) n() int { return t.rows * t.cols }

// tensor checks that x is a live tensor of this backend; op and name go into the error.
func (b *Backend) tensor(op, name string, x ops.Tensor) (*Tensor, error) {
	t, ok := x.(*Tensor)
	switch {
	case x == nil || (ok && t == nil):
		return nil, argErr(op, "%s is nil", name)
	case !ok:
		return nil, argErr(op, "%s is a %T, not a cuda tensor", name, x)
	case t.b != b:
		return nil, argErr(op, "%s belongs to another cuda backend", name)
	case t.freed:
		return nil, fmt.Errorf("%w: %s: %s (%v)", ErrFreed, op, name, t)
	}
	return t, nil
}

// tensors checks several tensors at once: names and xs pair up.
func (b *Backend) tensors(op string, names []string, xs ...ops.Tensor) ([]*Tensor, error) {
	out := make([]*Tensor, len(xs))
	for i, x := range xs {
		t, err := b.tensor(op, names[i], x)
		if err != nil {
			return nil, err
		}
		out[i] = t
	}
	return out, nil
}

// f32All is f32 of each of ts, in order.
func (c *opCtx) f32All(ts []*Tensor) ([]uint64, error) { return each(ts, c.f32) }

// each is the device addresses get gives for each of ts, in order (f32All, rawAll).
func each(ts []*Tensor, get func(*Tensor) (uint64, error)) ([]uint64, error) {
	out := make([]uint64, len(ts))
	for i, t := range ts {
		p, err := get(t)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// f32 returns the device address of t's values as float32: t itself (rounded first if its rounding was
// deferred, deferred.go), or for a bfloat16 weight a widened copy made once and kept with the tensor
// (weights never change).
func (c *opCtx) f32(t *Tensor) (uint64, error) {
	if t.dt == dtF32 {
		return t.ptr, c.settle(t)
	}
	if t.wide == 0 && t.n() > 0 {
		p, err := c.b.dv.Malloc(4 * t.n())
		if err != nil {
			return 0, err
		}
		if err := c.launch1D("k_widen_bf16", t.n(), p, t.ptr, int64(t.n())); err != nil {
			return 0, fmt.Errorf("%w (freeing: %v)", err, c.b.dv.Free(p))
		}
		t.wide = p
	}
	return t.wide, nil
}

// maxElements is the most elements a tensor may hold: 2^34, 64 GiB of float32. Every kernel indexes
// elements with 64-bit integers (i64 offsets; element and row counts passed as long long), so the bound
// is not an index width. It is what a tensor can be used for: an op's input and output of 64 GiB each
// (128 GiB) still fit the largest device this targets (an H200, about 139 GiB), so a larger bound would
// admit no op that could run. Below it the grids stay within the hardware's limits: grid-stride kernels
// launch at most maxGrid blocks, the matmuls split n into launches of at most 65535 row tiles
// (gridDim.y), and the one-warp-per-group kernels launch ceil(groups / 8) blocks, at most 2^30 for groups
// of two or more values. launch checks every grid anyway: a shape past a limit (an RMSNorm of 2^34 groups
// of one value) fails with an error, never wraps. Rows and columns stay below 2^31 (checkDims): kernels take
// a column count as int, and row indices travel in int32 tables (sequence starts, routing rows, MLA
// tasks). cuBLASLt sees at most 2^31-1 elements an operand a call (ltCallRows).
const maxElements = 1 << 34

// checkDims refuses negative sizes, more than 2^31-1 rows or columns, and more than maxElements elements.
func checkDims(op string, rows, cols int) error {
	if rows < 0 || cols < 0 || rows > math.MaxInt32 || cols > math.MaxInt32 || (cols > 0 && rows > maxElements/cols) {
		return shapeErr(op, "bad size %dx%d (at most 2^31-1 rows, 2^31-1 columns and 2^34 elements)", rows, cols)
	}
	return nil
}

// Upload copies little-endian BF16 or F32 bytes to the device as they are (no host decoding): a BF16
// weight stays bfloat16 in device memory and kernels widen it exactly as they read it. The copy runs on
// the copy stream, directly from raw when it lies in a buffer from AllocHost (host.go), and Upload
// returns once it is done.
func (b *Backend) Upload(dt ops.DType, rows, cols int, raw []byte) (ops.Tensor, error) {
	const op = "Upload"
	if err := checkDims(op, rows, cols); err != nil {
		return nil, err
	}
	var st int32
	var size int
	switch dt {
	case ops.WeightBF16:
		st, size = dtBF16, 2*rows*cols
	case ops.WeightF32:
		st, size = dtF32, 4*rows*cols
	default:
		return nil, argErr(op, "unknown dtype %d", dt)
	}
	if len(raw) != size {
		return nil, shapeErr(op, "%s %dx%d needs %d bytes, got %d", map[int32]string{dtBF16: "bf16", dtF32: "f32"}[st], rows, cols, size, len(raw))
	}
	t := &Tensor{b: b, rows: rows, cols: cols, dt: st}
	err := b.run(op, func(c *opCtx) error {
		p, err := b.dv.MallocCopy(size)
		if err != nil {
			return err
		}
		t.ptr = p
		if err := b.uploadBytes(p, raw); err != nil {
			t.ptr = 0
			// The copy stream is waited for first: the block was allocated on it.
			return fmt.Errorf("%w (freeing: %v)", err, errors.Join(b.dv.SyncCopy(), b.dv.Free(p)))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// FromHost copies rows x cols float32 values to a new activation, rounded in BF16 precision.
func (b *Backend) FromHost(rows, cols int, data []float32) (ops.Tensor, error) {
	const op = "FromHost"
	if err := checkDims(op, rows, cols); err != nil {
		return nil, err
	}
	if len(data) != rows*cols {
		return nil, shapeErr(op, "%dx%d needs %d values, got %d", rows, cols, rows*cols, len(data))
	}
	var out *Tensor
	err := b.run(op, func(c *opCtx) error {
		var err error
		if out, err = c.out(rows, cols); err != nil {
			return err
		}
		if err := b.dv.ToDevice(out.ptr, bytesOf(data)); err != nil { // copied, never written
			return err
		}
		if b.bf == 1 {
			return c.roundF32(out.ptr, out.ptr, out.n(), b.bf)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ToHost copies a tensor's values out as float32, row-major (a bfloat16 weight is widened on the host,
// exactly). It waits for every op queued before it.
func (b *Backend) ToHost(x ops.Tensor) ([]float32, error) {
	const op = "ToHost"
	t, err := b.tensor(op, "x", x)
	if err != nil {
		return nil, err
	}
	out := make([]float32, t.n())
	err = b.run(op, func(c *opCtx) error {
		if t.dt == dtBF16 {
			raw := make([]byte, 2*t.n())
			if err := b.dv.ToHost(raw, t.ptr); err != nil {
				return err
			}
			bf16.Decode(out, raw)
			return nil
		}
		if err := c.settle(t); err != nil {
			return err
		}
		return download(b, out, t.ptr)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Free releases a *Tensor's, *Expert's or token-slice carry's device memory (stream-ordered: after the work already queued);
// later use is an ErrFreed error. nil, a second Free, another backend's objects and objects of a closed
// backend are ignored.
func (b *Backend) Free(x any) {
	var ptrs []uint64
	var ex *Expert
	switch t := x.(type) {
	case *carry: // a token slice's carry (slice.go): its tensors
		if t == nil || t.freed {
			return
		}
		t.freed = true
		for _, c := range t.t {
			b.Free(c)
		}
		return
	case *Tensor:
		if t == nil || t.freed || t.b != b {
			return
		}
		ptrs = []uint64{t.ptr, t.wide, t.narrow}
		t.ptr, t.wide, t.narrow, t.freed = 0, 0, 0, true
	case *Expert:
		if t == nil || t.freed || t.b != b {
			return
		}
		if t.block == nil {
			ptrs = []uint64{t.ptr}
		}
		t.ptr, t.freed = 0, true
		ex = t
	default:
		return
	}
	_ = b.run("Free", func(c *opCtx) error {
		// An expert's copy may still be in flight (an asynchronous upload, stable.go): the block is
		// freed on the compute stream, after it.
		if err := b.joinExpertFree(ex); err != nil {
			return err
		}
		if ex != nil && ex.block != nil {
			if err := b.releaseBlock(ex.block); err != nil {
				return err
			}
		}
		for _, p := range ptrs {
			if err := b.dv.Free(p); err != nil {
				return err
			}
		}
		return nil
	})
}

// Zeros returns a rows x cols float32 tensor of zeros.
func (b *Backend) Zeros(rows, cols int) (ops.Tensor, error) {
	const op = "Zeros"
	if err := checkDims(op, rows, cols); err != nil {
		return nil, err
	}
	var out *Tensor
	err := b.run(op, func(c *opCtx) error {
		var err error
		if out, err = c.out(rows, cols); err != nil || out.n() == 0 {
			return err
		}
		return b.drv.Check("cuMemsetD32Async", bind.Call(b.drv.CuMemsetD32Async, uintptr(out.ptr), 0, uintptr(out.n()), b.dv.Stream))
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// unary runs a grid-stride kernel name(out, x, n, args...) into a new activation shaped like x.
func (b *Backend) unary(op, name string, x ops.Tensor, args ...any) (ops.Tensor, error) {
	t, err := b.tensor(op, "x", x)
	if err != nil {
		return nil, err
	}
	var out *Tensor
	err = b.run(op, func(c *opCtx) error {
		xp, err := c.f32(t)
		if err != nil {
			return err
		}
		if out, err = c.out(t.rows, t.cols); err != nil {
			return err
		}
		return c.launch1D(name, t.n(), append([]any{out.ptr, xp, int64(t.n())}, args...)...)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// binary runs a grid-stride kernel name(out, x, y, n, args...) over two tensors of one shape. With raw
// the kernel rounds both inputs as it loads them in BF16 precision, so a deferred rounding stays with the
// inputs (deferred.go); else they are rounded first.
func (b *Backend) binary(op, name string, raw bool, xn, yn string, x, y ops.Tensor, args ...any) (ops.Tensor, error) {
	ts, err := b.tensors(op, []string{xn, yn}, x, y)
	if err != nil {
		return nil, err
	}
	p, q := ts[0], ts[1]
	if p.rows != q.rows || p.cols != q.cols {
		return nil, shapeErr(op, "%s %v and %s %v differ", xn, p, yn, q)
	}
	var out *Tensor
	err = b.run(op, func(c *opCtx) error {
		in := c.f32All
		if raw {
			in = c.rawAll
		}
		ps, err := in([]*Tensor{p, q})
		if err != nil {
			return err
		}
		pp, qp := ps[0], ps[1]
		if out, err = c.out(p.rows, p.cols); err != nil {
			return err
		}
		if v4, ok := vec4Kernels[name]; ok && p.n()%4 == 0 && aligned16(out.ptr, pp, qp) {
			if vn, ok := vec4NarrowKernels[name]; ok && b.keepsNarrow(p.cols) {
				return c.keepNarrowOutput(out, func(op, nb uint64) error {
					return c.launch1D(vn, p.n()/4, append([]any{op, pp, qp, int64(p.n() / 4)}, append(args, nb)...)...)
				})
			}
			return c.launch1D(v4, p.n()/4, append([]any{out.ptr, pp, qp, int64(p.n() / 4)}, args...)...)
		}
		return c.launch1D(name, p.n(), append([]any{out.ptr, pp, qp, int64(p.n())}, args...)...)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// vec4Kernels maps an elementwise kernel to its four-elements-a-thread form (elementwise.cu version 2:
// the same statement per element), launched over n / 4 quads when n % 4 == 0 and the buffers are 16-byte
// aligned.
var vec4Kernels = map[string]string{"k_add": "k_add4", "k_mul_sigmoid": "k_mul_sigmoid4"}

// vec4NarrowKernels maps a four-element kernel's scalar form to the form that also writes the output's
// bfloat16 copy (narrow.go), with the copy's address as its last argument, for outputs a MatMul reads
// next where keepsNarrow says so (MulSigmoid: MLA's gated output before o_proj). With a null output the
// copy alone is written (narrow-only outputs, narrow.go).
var vec4NarrowKernels = map[string]string{"k_mul_sigmoid": "k_mul_sigmoid4n"}

// Round returns rounded(x): a copy in FP32 precision.
func (b *Backend) Round(x ops.Tensor) (ops.Tensor, error) {
	return b.unary("Round", "k_round", x, b.bf)
}

// Add returns rounded(a + b) elementwise (k_add, or k_add4 four elements a thread where the size and
// the buffers allow: the same bits). The kernels round a and b as they load them (a deferred rounding,
// deferred.go; the values they were owed).
func (b *Backend) Add(x, y ops.Tensor) (ops.Tensor, error) {
	return b.binary("Add", "k_add", true, "a", "b", x, y, b.bf)
}

// MulSigmoid returns rounded(x * sigmoid(gate)) elementwise (k_mul_sigmoid, or k_mul_sigmoid4 four
// elements a thread: the same bits; the sigmoid in double, or in single precision where that provably
// gives the same bits). Like Add, the kernels round x and gate as they load them. Where keepsNarrow says
// so, k_mul_sigmoid4n also writes the output's bfloat16 copy for the MatMul that reads it (narrow.go).
func (b *Backend) MulSigmoid(x, gate ops.Tensor) (ops.Tensor, error) {
	return b.binary("MulSigmoid", "k_mul_sigmoid", true, "x", "gate", x, gate, b.bf)
}

// SiTUGLU returns rounded(situ(gate, up)) elementwise (k_situ), the CPU backend's float32 expression.
func (b *Backend) SiTUGLU(gate, up ops.Tensor, beta, linBeta float32) (ops.Tensor, error) {
	if beta == 0 || linBeta == 0 {
		return nil, argErr("SiTUGLU", "beta %g and linBeta %g must be non-zero", beta, linBeta)
	}
	return b.binary("SiTUGLU", "k_situ", false, "gate", "up", gate, up, beta, linBeta, b.bf)
}

// Slice returns columns from .. to-1 of x, a copy without rounding (k_slice); a deferred rounding of x
// stays deferred in the copy.
func (b *Backend) Slice(x ops.Tensor, from, to int) (ops.Tensor, error) {
	const op = "Slice"
	t, err := b.tensor(op, "x", x)
	if err != nil {
		return nil, err
	}
	if from < 0 || to > t.cols || from > to {
		return nil, shapeErr(op, "columns [%d, %d) of x %v", from, to, t)
	}
	w := to - from
	var out *Tensor
	err = b.run(op, func(c *opCtx) error {
		xp, err := c.raw(t) // a copy: it keeps a deferred rounding (deferred.go)
		if err != nil {
			return err
		}
		if out, err = c.out(t.rows, w); err != nil {
			return err
		}
		out.unrounded = t.unrounded
		return c.launch1D("k_slice", t.rows*w, out.ptr, xp, int64(t.rows), int32(t.cols), int32(from), int32(w))
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Gather returns out[i,:] = table[ids[i],:], unrounded (k_gather reads a bfloat16 table as stored;
// k_gather4, a block a row and four columns a thread, where the width and alignment allow: the same bits).
func (b *Backend) Gather(table ops.Tensor, ids []int32) (ops.Tensor, error) {
	const op = "Gather"
	t, err := b.tensor(op, "table", table)
	if err != nil {
		return nil, err
	}
	for i, id := range ids {
		if id < 0 || int(id) >= t.rows {
			return nil, argErr(op, "ids[%d] = %d outside the table's %d rows", i, id, t.rows)
		}
	}
	if err := checkDims(op, len(ids), t.cols); err != nil {
		return nil, err
	}
	var out *Tensor
	err = b.run(op, func(c *opCtx) error {
		var err error
		if out, err = c.out(len(ids), t.cols); err != nil || out.n() == 0 {
			return err
		}
		out.unrounded = t.unrounded // a copy keeps a deferred rounding (deferred.go)
		idp, err := uploadTemp(c, ids)
		if err != nil {
			return err
		}
		talign := uint64(16)
		if t.dt == dtBF16 {
			talign = 8
		}
		if t.cols%4 == 0 && out.ptr%16 == 0 && t.ptr%talign == 0 && len(ids) <= maxGridX {
			return c.launch("k_gather4", d1(len(ids)), d1(ewThreads), 0, out.ptr, t.ptr, t.dt, idp, int32(t.cols/4))
		}
		return c.launch1D("k_gather", out.n(), out.ptr, t.ptr, t.dt, idp, int64(len(ids)), int32(t.cols))
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// shapeErr builds an ErrShape error naming the op.
func shapeErr(op, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrShape, op, fmt.Sprintf(format, args...))
}

// argErr builds an ErrArgument error naming the op.
func argErr(op, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrArgument, op, fmt.Sprintf(format, args...))
}

// MaxElements implements ops.ElementLimit: 2^34 elements (maxElements says why), so a wave of 65,536
// K3 tokens (65,536 x 49,152 = 3.2e9 elements at its widest activation) runs as one wave.
func (b *Backend) MaxElements() int64 { return maxElements }
