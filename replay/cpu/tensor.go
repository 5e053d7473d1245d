package cpu

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Tensor is the CPU backend's ops.Tensor: rows x cols float32 values, row-major. Weights hold their
// decoded values exactly; activations made in BF16 precision hold bfloat16-representable values.
type Tensor struct {
	rows, cols int
	data       []float32 // nil once freed
	freed      bool
}

// Rows is the number of rows.
func (t *Tensor) Rows() int { return t.rows }

// Cols is the number of columns.
func (t *Tensor) Cols() int { return t.cols }

// String describes the shape, for error messages.
func (t *Tensor) String() string { return fmt.Sprintf("%dx%d", t.rows, t.cols) }

func newTensor(rows, cols int) *Tensor {
	return &Tensor{rows: rows, cols: cols, data: make([]float32, rows*cols)}
}

// tensor checks that x is a live tensor of this backend; op and name go into the error.
func tensor(op, name string, x ops.Tensor) (*Tensor, error) {
	t, ok := x.(*Tensor)
	switch {
	case x == nil || (ok && t == nil):
		return nil, argErr(op, "%s is nil", name)
	case !ok:
		return nil, argErr(op, "%s is a %T, not a cpu tensor", name, x)
	case t.freed:
		return nil, fmt.Errorf("%w: %s: %s (%v)", ErrFreed, op, name, t)
	}
	return t, nil
}

// tensors checks several tensors at once: names and xs pair up.
func tensors(op string, names []string, xs ...ops.Tensor) ([]*Tensor, error) {
	out := make([]*Tensor, len(xs))
	for i, x := range xs {
		t, err := tensor(op, names[i], x)
		if err != nil {
			return nil, err
		}
		out[i] = t
	}
	return out, nil
}

// checkDims refuses negative sizes and sizes whose element count overflows int.
func checkDims(op string, rows, cols int) error {
	if rows < 0 || cols < 0 || (cols > 0 && rows > math.MaxInt/cols) {
		return shapeErr(op, "bad size %dx%d", rows, cols)
	}
	return nil
}

// Upload decodes little-endian BF16 or F32 bytes exactly into a rows x cols weight (see ops.Backend).
// Weights are never rounded, in either precision.
func (b *Backend) Upload(dt ops.DType, rows, cols int, raw []byte) (ops.Tensor, error) {
	const op = "Upload"
	if err := checkDims(op, rows, cols); err != nil {
		return nil, err
	}
	t := newTensor(rows, cols)
	switch dt {
	case ops.WeightBF16:
		if len(raw) != 2*len(t.data) {
			return nil, shapeErr(op, "bf16 %dx%d needs %d bytes, got %d", rows, cols, 2*len(t.data), len(raw))
		}
		bf16.Decode(t.data, raw)
	case ops.WeightF32:
		if len(raw) != 4*len(t.data) {
			return nil, shapeErr(op, "f32 %dx%d needs %d bytes, got %d", rows, cols, 4*len(t.data), len(raw))
		}
		for i := range t.data {
			t.data[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	default:
		return nil, argErr(op, "unknown dtype %d", dt)
	}
	return t, nil
}

// FromHost copies rows x cols float32 values into an activation tensor, rounded (see ops.Backend).
func (b *Backend) FromHost(rows, cols int, data []float32) (ops.Tensor, error) {
	const op = "FromHost"
	if err := checkDims(op, rows, cols); err != nil {
		return nil, err
	}
	if len(data) != rows*cols {
		return nil, shapeErr(op, "%dx%d needs %d values, got %d", rows, cols, rows*cols, len(data))
	}
	t := newTensor(rows, cols)
	copy(t.data, data)
	b.roundAll(t.data)
	return t, nil
}

// ToHost returns a copy of the tensor's values, row-major.
func (b *Backend) ToHost(x ops.Tensor) ([]float32, error) {
	t, err := tensor("ToHost", "x", x)
	if err != nil {
		return nil, err
	}
	return append([]float32(nil), t.data...), nil
}

// Free drops the storage of a *Tensor or *Expert; later use is an ErrFreed error. Other values (nil,
// another backend's objects) are ignored: Free has no error to report them with.
func (b *Backend) Free(x any) {
	switch t := x.(type) {
	case *Tensor:
		if t != nil {
			t.data, t.freed = nil, true
		}
	case *Expert:
		if t != nil {
			t.w1, t.w3, t.w2, t.freed = nil, nil, nil, true
		}
	case *carry:
		if t != nil {
			t.x, t.state, t.latent, t.ks, t.freed = nil, nil, nil, nil, true
		}
	}
}

// Zeros returns a rows x cols tensor of zeros.
func (b *Backend) Zeros(rows, cols int) (ops.Tensor, error) {
	if err := checkDims("Zeros", rows, cols); err != nil {
		return nil, err
	}
	return newTensor(rows, cols), nil
}

// Round returns a rounded copy of x (a plain copy in FP32 precision).
func (b *Backend) Round(x ops.Tensor) (ops.Tensor, error) {
	t, err := tensor("Round", "x", x)
	if err != nil {
		return nil, err
	}
	out := &Tensor{rows: t.rows, cols: t.cols, data: append([]float32(nil), t.data...)}
	b.roundAll(out.data)
	return out, nil
}

// Gather returns out[i,:] = table[ids[i],:], unrounded: the table is a bf16 weight, exact either way.
func (b *Backend) Gather(table ops.Tensor, ids []int32) (ops.Tensor, error) {
	const op = "Gather"
	t, err := tensor(op, "table", table)
	if err != nil {
		return nil, err
	}
	out := newTensor(len(ids), t.cols)
	for i, id := range ids {
		if id < 0 || int(id) >= t.rows {
			return nil, argErr(op, "ids[%d] = %d outside the table's %d rows", i, id, t.rows)
		}
		copy(out.data[i*t.cols:(i+1)*t.cols], t.data[int(id)*t.cols:])
	}
	return out, nil
}

// JoinRows implements ops.RowJoiner: the parts' rows one after the other, copied.
func (b *Backend) JoinRows(parts []ops.Tensor) (ops.Tensor, error) {
	const op = "JoinRows"
	if len(parts) == 0 {
		return nil, argErr(op, "no parts")
	}
	ts := make([]*Tensor, len(parts))
	rows := 0
	for i, x := range parts {
		t, err := tensor(op, fmt.Sprintf("parts[%d]", i), x)
		if err != nil {
			return nil, err
		}
		if t.cols != parts[0].Cols() {
			return nil, shapeErr(op, "parts[%d] %v has %d columns, parts[0] %d", i, t, t.cols, parts[0].Cols())
		}
		ts[i], rows = t, rows+t.rows
	}
	out := newTensor(rows, ts[0].cols)
	at := 0
	for _, t := range ts {
		at += copy(out.data[at:], t.data[:t.rows*t.cols])
	}
	return out, nil
}

// Slice returns out[i,j] = x[i, from+j] for j < to-from, a copy without rounding.
func (b *Backend) Slice(x ops.Tensor, from, to int) (ops.Tensor, error) {
	const op = "Slice"
	t, err := tensor(op, "x", x)
	if err != nil {
		return nil, err
	}
	if from < 0 || to > t.cols || from > to {
		return nil, shapeErr(op, "columns [%d, %d) of x %v", from, to, t)
	}
	w := to - from
	out := newTensor(t.rows, w)
	for i := range t.rows {
		copy(out.data[i*w:(i+1)*w], t.data[i*t.cols+from:i*t.cols+to])
	}
	return out, nil
}

// Add returns out[i] = rounded(a[i] + b[i]).
func (b *Backend) Add(x, y ops.Tensor) (ops.Tensor, error) {
	began := b.opStart()
	const op = "Add"
	ts, err := tensors(op, []string{"a", "b"}, x, y)
	if err != nil {
		return nil, err
	}
	p, q := ts[0], ts[1]
	if p.rows != q.rows || p.cols != q.cols {
		return nil, shapeErr(op, "a %v and b %v differ", p, q)
	}
	out := newTensor(p.rows, p.cols)
	b.parallelRange(len(out.data), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out.data[i] = b.r(p.data[i] + q.data[i])
		}
	})
	if err := b.interrupted(op, began); err != nil {
		return nil, err
	}
	return out, nil
}
