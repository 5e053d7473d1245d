package cuda

import (
	"fmt"

	"github.com/potato-k3/potato-k3/replay/ops"
)

var _ ops.MixNormer = (*Backend)(nil)

// AttnResMixNorm implements ops.MixNormer: RMSNorm(AttnResMix(vs, wg), w, eps) in one kernel (norm.cu
// k_attnres_norm3_* or k_attnres_norm2_*: mixNormKernel) where the output keeps only its bfloat16 copy
// (keepsNarrow, narrow.go) and both ops would run version 2 with w one group over the row: the mix stays
// in registers (or, for rows of up to 1,024 values, in shared memory), so the float32 mix is neither
// written nor read back, about 3.8 GB at each site of a 65,536-token slice at K3's width. The kernel runs
// the two kernels' statements, each in its own thread layout, so the bits are theirs. Elsewhere (and with
// Options.UnfusedMixNorm) it runs the two ops. weights as AttnResMix's: p is copied to the host only when
// set.
func (b *Backend) AttnResMixNorm(vs []ops.Tensor, wg, w ops.Tensor, eps float32, weights bool) (ops.Tensor, []float32, error) {
	const op = "AttnResMixNorm"
	v, wgt, err := b.mixOperands(op, vs, wg)
	if err != nil {
		return nil, nil, err
	}
	wt, err := b.tensor(op, "w", w)
	if err != nil {
		return nil, nil, err
	}
	rows, cols, n := v[0].rows, v[0].cols, len(v)
	if !b.fusesMixNorm(wt, cols) {
		return b.mixThenNorm(vs, wg, w, eps, weights)
	}
	var out *Tensor
	var p []float32
	if weights {
		p = make([]float32, rows*n)
	}
	err = b.run(op, func(c *opCtx) error {
		ptrs, wgp, err := c.mixInputs(v, wgt)
		if err != nil {
			return err
		}
		wp, err := c.f32(wt)
		if err != nil {
			return err
		}
		if out, err = c.out(rows, cols); err != nil || rows == 0 {
			return err
		}
		name, shmem, ok := mixNormKernel(b.mixNormForm(n), cols, n, append(ptrs, wgp, wp, out.ptr)...)
		if !ok { // an operand not 16-byte aligned: never for pool allocations
			return fmt.Errorf("%w: %s: operands not 16-byte aligned", ErrInternal, op)
		}
		vsp, pp, err := c.mixTables(ptrs, rows)
		if err != nil {
			return err
		}
		err = c.keepNarrowOutput(out, func(op, nb uint64) error {
			return c.launch(name, d1(rows), d1(normThreads), shmem, op, nb, pp, vsp, int32(n), wgp, int32(cols), wp, eps, b.bf)
		})
		if err != nil {
			return err
		}
		return download(b, p, pp) // nothing, and no wait for the device, when p is nil
	})
	if err != nil {
		return nil, nil, err
	}
	return out, p, nil
}

// fusesMixNorm reports whether AttnResMixNorm runs its fused kernel for rows of cols values normed by w:
// where RMSNorm keeps only the bfloat16 copy of its output (keepsNarrow), both ops run version 2, and w
// is one group over the row (1 x cols), unless Options.UnfusedMixNorm.
func (b *Backend) fusesMixNorm(w *Tensor, cols int) bool {
	return !b.opts.UnfusedMixNorm && b.normVer != 1 && b.keepsNarrow(cols) && w.rows == 1 && w.cols == cols &&
		cols <= norm2Max // keepsNarrow: cols a multiple of 8
}

// mixNormForm is the fused mix and norm's version for rows over 1,024 values mixing n vectors: the test
// knob mixForm when set, else "v3" (norm.cu's attnres3_mix: one barrier for the scores) up to mixV3Most
// vectors and "v2" beyond. Both give the same bits. Run 121 (TestNormTiming, 65,536 x 7,168): version 2
// / version 3 = 1.14, 1.23, 1.11, 1.03 at 1-4 vectors, 0.98, 0.98, 0.93, 0.83, 0.82 at 5-9.
func (b *Backend) mixNormForm(n int) string {
	switch {
	case b.mixForm != "":
		return b.mixForm
	case n <= mixV3Most:
		return "v3"
	}
	return "v2"
}

// mixV3Most is the most vectors the fused mix and norm runs version 3 for (mixNormForm); mixMaxV3 the most
// it can (a lane of each warp a vector).
const (
	mixV3Most = 4
	mixMaxV3  = 32
)

// mixNormKernel names the fused kernel for rows of cols values mixing n vectors, with its dynamic shared
// memory: the layout of k_rmsnorm2's choice for a group of cols (rmsnorm2Kernel), the mix's chunks as
// k_attnres2's (attnres2Kernel); for rows over 1,024 values version 3 where form says so ("v3", up to
// mixMaxV3 vectors), else version 2: the same bits. ok is false where either op would not run version 2.
func mixNormKernel(form string, cols, n int, ptrs ...uint64) (name string, shmem int, ok bool) {
	if _, ok := attnres2Kernel(cols, ptrs...); !ok {
		return "", 0, false
	}
	if cols > 1024 && n <= mixMaxV3 && form == "v3" { // warp sums of every vector: 16 floats each
		return fmt.Sprintf("k_attnres_norm3_c%d", norm2CPT(cols, normThreads)), 64 * n, true
	}
	if cols > 1024 { // k_rmsnorm2_w8: a block over the row, as the mix
		return fmt.Sprintf("k_attnres_norm2_c%d_n0", norm2CPT(cols, normThreads)), 4 * n, true
	}
	return fmt.Sprintf("k_attnres_norm2_c1_n%d", norm2CPT(cols, 32)), 16*((n+3)/4) + 4*cols, true
}

// mixThenNorm is AttnResMixNorm as the two ops.
func (b *Backend) mixThenNorm(vs []ops.Tensor, wg, w ops.Tensor, eps float32, weights bool) (ops.Tensor, []float32, error) {
	h, p, err := b.attnResMix(vs, wg, weights)
	if err != nil {
		return nil, nil, err
	}
	out, err := b.RMSNorm(h, w, eps)
	b.Free(h)
	if err != nil {
		return nil, nil, err
	}
	return out, p, nil
}
