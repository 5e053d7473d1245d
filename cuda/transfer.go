package cuda

import (
	"errors"
	"fmt"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// The engine keeps the per-token state of slices that do not fit the device in host memory, and an
// expert-major layer's expert inputs too (replay/model/wave.go, moe_major.go): every slice of every layer
// crosses the bus both ways. Through ToHost and FromHost each value crossed as float32 and was widened
// or narrowed one at a time on the host: a 262,144-token sequence in 24 GB took 52.2 s a MoE layer that
// way, 14.0 s this way (docs/benchmarks.md, run 11). In BF16 precision the values are bfloat16 values, so
// they cross as their bits: half the bytes, the conversion a kernel on the device.

// ToHostBF16 implements ops.BF16Transfer: the activation's values narrowed on the device (exact: they
// are bfloat16 values) and copied out, two bytes a value; a bfloat16 weight is copied as it is. Waits for
// the work queued before it.
func (b *Backend) ToHostBF16(x ops.Tensor, dst []uint16) error {
	const op = "ToHostBF16"
	t, err := b.tensor(op, "x", x)
	if err != nil {
		return err
	}
	if b.bf != 1 {
		return argErr(op, "needs BF16 precision (this backend is FP32)")
	}
	if len(dst) != t.n() {
		return shapeErr(op, "%dx%d needs %d values, got a buffer of %d", t.rows, t.cols, t.n(), len(dst))
	}
	return b.run(op, func(c *opCtx) error {
		switch {
		case t.n() == 0:
			return nil
		case t.dt == dtBF16:
			return download(b, dst, t.ptr)
		case t.narrow != 0 && t.narrowLd == t.cols: // the copy a matmul made of it (narrow.go)
			return download(b, dst, t.narrow)
		}
		p, err := b.dv.Malloc(2 * t.n())
		if err != nil {
			return err
		}
		err = c.toBF16(p, t.ptr, t.rows, t.cols, t.cols)
		if err == nil {
			err = download(b, dst, p)
		}
		return errors.Join(err, b.dv.Free(p))
	})
}

// FromHostBF16 implements ops.BF16Transfer: the bits copied in, two bytes a value, and widened on the
// device into a new activation (bfloat16 values are their own rounding, so this is FromHost's result).
func (b *Backend) FromHostBF16(rows, cols int, src []uint16) (ops.Tensor, error) {
	const op = "FromHostBF16"
	if err := checkDims(op, rows, cols); err != nil {
		return nil, err
	}
	if b.bf != 1 {
		return nil, argErr(op, "needs BF16 precision (this backend is FP32)")
	}
	if len(src) != rows*cols {
		return nil, shapeErr(op, "%dx%d needs %d values, got %d", rows, cols, rows*cols, len(src))
	}
	var out *Tensor
	err := b.run(op, func(c *opCtx) error {
		var err error
		if out, err = c.out(rows, cols); err != nil || out.n() == 0 {
			return err
		}
		p, err := b.dv.Malloc(2 * out.n())
		if err != nil {
			return err
		}
		if err = b.dv.ToDevice(p, bytesOf(src)); err == nil {
			err = c.launch1D("k_widen_bf16", out.n(), out.ptr, p, int64(out.n()))
		}
		if err != nil {
			return fmt.Errorf("%w (freeing: %v)", err, b.dv.Free(p))
		}
		return b.dv.Free(p)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
