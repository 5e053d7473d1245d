package cuda

import (
	"fmt"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/replay/ops"
)

var _ ops.NarrowMatMuler = (*Backend)(nil)

// MatMulNarrow implements ops.NarrowMatMuler: MatMul(x, w) with its output narrow-only (narrow.go), the
// bfloat16 values alone, where the short convolution reads them so (convNarrow: BF16 precision on the
// tensor cores) and cuBLASLt has a pinned algorithm for the weight's shape with bfloat16 outputs. The
// GEMM's epilogue rounds each float32 sum to bfloat16 by round to nearest even, the rounding MatMul leaves
// to its reader (deferred.go); on the H200 every cuBLASLt configuration surveyed summed alike (no split of
// k, cublaslt_tune.go), and TestMatMulNarrowBits holds the two outputs to the same bits. At K3's q, k and
// v projections (65,536 x 12,288 a slice) that is 1.6 GB written instead of 3.2, and the convolution
// (k_shortconv4b) reads 1.6 GB instead of 3.2. Elsewhere, or for a weight that is not bfloat16, it is
// MatMul.
func (b *Backend) MatMulNarrow(x, w ops.Tensor) (ops.Tensor, error) {
	const op = "MatMul"
	ts, err := b.tensors(op, []string{"x", "w"}, x, w)
	if err != nil {
		return nil, err
	}
	xt, wt := ts[0], ts[1]
	if !b.convNarrow() || b.lt == nil || wt.dt != dtBF16 || xt.cols != wt.cols || xt.rows == 0 || xt.cols == 0 || !b.keepsNarrow(wt.rows) {
		return b.MatMul(x, w) // its checks and errors, or the product where no narrow output is kept
	}
	if err := checkDims(op, xt.rows, wt.rows); err != nil {
		return nil, err
	}
	var out *Tensor
	plain := false
	err = b.run(op, func(c *opCtx) error {
		s, err := b.lt.shapeOut(wt.rows, wt.cols, bind.R16BF)
		if err != nil {
			return err
		}
		if !s.ok {
			plain = true // no pinned algorithm with bfloat16 outputs for this shape: MatMul below
			return nil
		}
		if !s.tuned { // once per shape: MatMul's configuration, where the heuristic offers it here too
			s.tuned = true
			if ref, err := b.lt.shape(wt.rows, wt.cols); err == nil && ref.ok {
				if err := b.lt.adoptConfig(s, ref, wt.rows, wt.cols); err != nil {
					return err
				}
			}
		}
		if c.profiling() {
			c.detail = fmt.Sprintf("%dx%d bf16 out", wt.rows, wt.cols)
		}
		xb, err := c.narrowOf(xt, s.ldb) // x's bfloat16 copy, kept with it for the other projections
		if err != nil {
			return err
		}
		if out, err = c.out(xt.rows, wt.rows); err != nil {
			return err
		}
		err = c.keepNarrow(out, wt.rows, func(nb uint64) error { return c.ltGemm(s, nb, xb, wt.ptr, xt.rows, wt.rows, wt.cols) })
		out.narrowOnly = err == nil
		return err
	})
	if err != nil {
		return nil, err
	}
	if plain {
		return b.MatMul(x, w)
	}
	return out, nil
}
