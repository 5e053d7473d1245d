package cuda

import (
	"errors"
	"fmt"
)

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
//
// Narrow-only outputs. The norms' (AttnResMixNorm's too) and MulSigmoid's outputs are read by matmuls
// alone in K3's layers (q, k, v, g and the gates' projections; the router, the shared experts and
// routed_expert_down_proj; up_proj after routed_expert_norm; o_proj; lm_head), so where they keep the
// copy they no longer write the float32 values too (Tensor.narrowOnly; Options.EagerWidening writes
// both): at 65,536 rows that is 1.9 GB less written a hidden-width norm and 3.2 GB a 12,288-wide
// GatedRMSNorm or MulSigmoid. Run 116's op profiles at 262,144 tokens: RMSNorm 13.1 -> 10.8 ms a
// kda+moe layer and 15.0 -> 12.7 a mla+moe one, MulSigmoid 10.5 -> 8.2; GatedRMSNorm, bound by its
// sigmoids, about as before. The float32 storage is still allocated, so addresses and the plan's memory
// stay as they were; a reader that needs the float32 values widens the copy into it first (widen:
// exact, the copy holds bfloat16 values), as a deferred rounding is settled (deferred.go): f32, raw and
// settle do so, and the row copies (catRows, copyRows). MatMul, Route and TokenStats take x's address by
// xaddr instead, which does not widen: gemm widens c.xsrc only for a kernel that reads float32 (no
// pinned cuBLASLt algorithm for the shape), and narrowOf before replacing the copy.

// narrowOf returns t's bfloat16 copy with rows ld elements apart, making it on first use (ordered on the
// compute stream, like every op's work).
func (c *opCtx) narrowOf(t *Tensor, ld int) (uint64, error) {
	if t.narrow != 0 && t.narrowLd == ld {
		return t.narrow, nil
	}
	if err := c.widen(t); err != nil { // the copy is about to go: its values first
		return 0, err
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

// dropNarrow frees t's bfloat16 copy, if any (stream-ordered: after the work queued that reads it). A
// narrow-only tensor's copy holds its values: widen it first.
func (b *Backend) dropNarrow(t *Tensor) error {
	if t.narrow == 0 {
		return nil
	}
	if t.narrowOnly {
		return fmt.Errorf("%w: dropping the bfloat16 copy of a narrow-only %v would lose its values", ErrInternal, t)
	}
	p := t.narrow
	t.narrow, t.narrowLd = 0, 0
	return b.dv.Free(p)
}

// keepNarrowOutput runs an op's launch for out and its new bfloat16 copy (keepNarrow, rows of out.cols):
// launch gets the float32 output's address, 0 where the copy alone is to hold the values, unless
// Options.EagerWidening, and the copy's; out is then narrow-only (Tensor.narrowOnly).
func (c *opCtx) keepNarrowOutput(out *Tensor, launch func(op, nb uint64) error) error {
	only, op := !c.b.opts.EagerWidening, out.ptr
	if only {
		op = 0
	}
	err := c.keepNarrow(out, out.cols, func(nb uint64) error { return launch(op, nb) })
	out.narrowOnly = only && err == nil
	return err
}

// widen writes a narrow-only t's float32 values from its bfloat16 copy (k_widen_bf16: exact) and clears
// the mark; any other tensor is left as it is. Stream-ordered, like every op's work.
func (c *opCtx) widen(t *Tensor) error {
	if !t.narrowOnly {
		return nil
	}
	if t.narrowLd != t.cols || t.dt != dtF32 {
		return fmt.Errorf("%w: narrow-only %v with its copy's rows %d apart", ErrInternal, t, t.narrowLd)
	}
	if t.n() > 0 {
		if err := c.launch1D("k_widen_bf16", t.n(), t.ptr, t.narrow, int64(t.n())); err != nil {
			return err
		}
	}
	t.narrowOnly = false
	return nil
}

// xaddr is the address of a matmul's x (MatMul, Route, TokenStats; c.xsrc): f32's, except that a
// narrow-only x is not widened, since gemm reads its copy (and widens it where it cannot).
func (c *opCtx) xaddr(t *Tensor) (uint64, error) {
	if t.narrowOnly {
		return t.ptr, nil
	}
	return c.f32(t)
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
