package cuda

import "errors"

// The bfloat16 copy of a matmul's x, kept with the tensor.
//
// cuBLASLt reads x as bfloat16, so every MatMul on it converts its float32 x first (k_to_bf16; exact in
// BF16 precision, where activations hold bfloat16 values). A layer's normed input feeds several
// projections (a KDA layer's q, k, v, g, f_a and b; an MLA layer's q_a, kv_a and g), which converted the
// same tensor once each: at 65,536 x 7,168 about 0.9 ms a conversion. The first such MatMul keeps its
// copy on the tensor (Tensor.narrow) and the next ones read it; RMSNorm, GatedRMSNorm and MulSigmoid
// (MLA's gated output, o_proj's x), whose outputs are such inputs, write the copy with their output
// (norm.go keepsNarrow), so not even the first MatMul converts; the fused FFN and TokenStats' lm_head read
// it too; ExpertsAccumulate's cuBLASLt path makes z's copy and gathers its rows from it, once for a pooled
// layer's calls (moe.go). Free releases it with the tensor. The only op that writes into an existing tensor,
// ExpertsAccumulate (its acc), drops the copy first. The values a GEMM reads are the same either way, so
// no bit changes.

// narrowOf returns t's bfloat16 copy with rows ld elements apart, making it on first use (ordered on the
// compute stream, like every op's work).
func (c *opCtx) narrowOf(t *Tensor, ld int) (uint64, error) {
	if t.narrow != 0 && t.narrowLd == ld {
		return t.narrow, nil
	}
	if err := c.b.dropNarrow(t); err != nil {
		return 0, err
	}
	err := c.keepNarrow(t, ld, func(p uint64) error { return c.toBF16(p, t.ptr, t.rows, t.cols, ld) })
	return t.narrow, err
}

// keepNarrow runs launch with a new bfloat16 copy of out (rows ld values apart) for the kernel to write,
// and keeps the copy with out; on failure it frees the copy. out has none (dropNarrow).
func (c *opCtx) keepNarrow(out *Tensor, ld int, launch func(nb uint64) error) error {
	nb, err := c.b.dv.Malloc(2 * ld * out.rows)
	if err != nil {
		return err
	}
	if err := launch(nb); err != nil {
		return errors.Join(err, c.b.dv.Free(nb))
	}
	out.narrow, out.narrowLd = nb, ld
	return nil
}

// dropNarrow frees t's bfloat16 copy, if any (stream-ordered: after the work queued that reads it).
func (b *Backend) dropNarrow(t *Tensor) error {
	if t.narrow == 0 {
		return nil
	}
	p := t.narrow
	t.narrow, t.narrowLd = 0, 0
	return b.dv.Free(p)
}

// rowOf reports whether x .. x + n rows of k float32 values are whole rows of t (a float32 activation;
// t may be nil), and the first one's index.
func (t *Tensor) rowOf(x uint64, n, k int) (int, bool) {
	if t == nil || t.dt != dtF32 || t.cols != k || k == 0 || x < t.ptr {
		return 0, false
	}
	off := int(x - t.ptr)
	if off%(4*k) != 0 {
		return 0, false
	}
	row := off / (4 * k)
	return row, row+n <= t.rows
}
