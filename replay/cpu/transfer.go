package cpu

import (
	"sync/atomic"

	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// ToHostBF16 implements ops.BF16Transfer: dst[i] = the upper half of value i's bits, in BF16 precision,
// refusing a value that is not a bfloat16 value (its lower half nonzero: a float32 that was never
// rounded), which no activation of BF16 precision is.
func (b *Backend) ToHostBF16(x ops.Tensor, dst []uint16) error {
	began := b.opStart()
	const op = "ToHostBF16"
	if !b.bf {
		return argErr(op, "needs BF16 precision (this backend is FP32)")
	}
	t, err := tensor(op, "x", x)
	if err != nil {
		return err
	}
	if len(dst) != len(t.data) {
		return shapeErr(op, "%dx%d needs %d values, got a buffer of %d", t.rows, t.cols, len(t.data), len(dst))
	}
	var bad atomic.Bool
	const chunk = 1 << 16
	b.parallel((len(dst)+chunk-1)/chunk, func(i int) {
		lo, hi := i*chunk, min(len(dst), (i+1)*chunk)
		if !bf16.Bits(dst[lo:hi], t.data[lo:hi]) {
			bad.Store(true)
		}
	})
	if err := b.interrupted(op, began); err != nil {
		return err
	}
	if bad.Load() {
		return argErr(op, "a value of the %dx%d tensor is not a bfloat16 value", t.rows, t.cols)
	}
	return nil
}

// FromHostBF16 implements ops.BF16Transfer: an activation of the bfloat16 values src holds (exact, so
// FromHost's rounding changes none).
func (b *Backend) FromHostBF16(rows, cols int, src []uint16) (ops.Tensor, error) {
	began := b.opStart()
	const op = "FromHostBF16"
	if !b.bf {
		return nil, argErr(op, "needs BF16 precision (this backend is FP32)")
	}
	if err := checkDims(op, rows, cols); err != nil {
		return nil, err
	}
	if len(src) != rows*cols {
		return nil, shapeErr(op, "%dx%d needs %d values, got %d", rows, cols, rows*cols, len(src))
	}
	t := newTensor(rows, cols)
	const chunk = 1 << 16
	b.parallel((len(src)+chunk-1)/chunk, func(i int) {
		lo, hi := i*chunk, min(len(src), (i+1)*chunk)
		bf16.Widen(t.data[lo:hi], src[lo:hi])
	})
	if err := b.interrupted(op, began); err != nil {
		return nil, err
	}
	return t, nil
}
