package cuda

import (
	"errors"
	"fmt"
	"math"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// The fused SiTU-GLU FFN (ops.SiTUFFN): layer 0's dense FFN and the shared experts of every MoE layer.
// In BF16 precision, with bfloat16 weights and a pinned cuBLASLt algorithm for both weight shapes
// (cublaslt_plan.go), each block of rows runs
//
//	xb = bf16(x[rows])                                   k_to_bf16, once for both GEMMs (or x's kept copy)
//	g  = xb . gate^T,  u = xb . up^T                     two cuBLASLt GEMMs into float32, unrounded
//	h  = rnd(situ(rnd(g), rnd(u))) as bfloat16           k_situ_glu_bf16 (SiTU by the experts' tables)
//	y[rows] = h . down^T                                 a cuBLASLt GEMM into the output, float32
//
// and then y = rnd(y) (k_round). Every step is the one the unfused ops take, with the same operands: MatMul
// converts x by k_to_bf16 and runs the same pinned algorithm, k_round then k_situ give the bits the lookups
// give (the tables hold situ_f's factors of every bfloat16 input), and the down MatMul's k_to_bf16 of h
// is exact. So the result equals MatMul(SiTUGLU(MatMul(x, gate), MatMul(x, up)), down) bit for bit, and a
// row's bits depend on its own x row only (the pinned algorithms are batch invariant), whatever the block
// it falls in. Saved against the unfused ops: the second conversion of x, two k_round passes over the
// float32 gate and up outputs, k_situ's double-precision transcendentals, the float32 h and its
// conversion (cuda/records/JOURNAL.md has the timings).
//
// Everything else (FP32 precision, NoTensorCores, no cuBLASLt, a shape without a pinned algorithm, float32
// weights, a width that is not a multiple of 8, an empty operand, bad arguments) runs the unfused ops
// themselves, so the contract holds by construction there.

var _ ops.SiTUFFN = (*Backend)(nil)

// ffnScratchBytes bounds the float32 gate and up outputs of one block of rows: 1 GiB, 3,968 rows of K3's
// dense FFN (width 33,792), 21,824 of a shared expert (width 6,144). Blocks of a few thousand rows keep
// every GEMM large enough for cuBLASLt's big tiles; a row's bits do not depend on its block.
const ffnScratchBytes = 1 << 30

// ffnBlockRows is the number of rows of one block for width ffn: a multiple of 64 (so every block's output
// starts 16-byte aligned for cuBLASLt), at least 64. rowsKnob overrides it in tests (Backend.ffnRows).
func ffnBlockRows(ffn, rowsKnob int) int {
	if rowsKnob > 0 {
		return rowsKnob
	}
	return max(64, ffnScratchBytes/(8*ffn)&^63)
}

// ffnBlock is the rows of each block for n rows and at most most rows a block: n's rows split evenly
// into as few blocks as most allows, rounded up to a multiple of 64 (so every block starts 16-byte aligned
// and the last block is not a sliver: at 65,536 rows of K3's dense FFN, 16 blocks of 3,904 rows and one
// of 3,072 instead of 16 of 3,968 and one of 2,048, whose GEMMs fill the GPU poorly). At most most, a
// multiple of 64. A row's bits do not depend on its block.
func ffnBlock(n, most int) int {
	if n <= most {
		return n
	}
	blocks := (n + most - 1) / most
	return min(most, ((n+blocks-1)/blocks+63)&^63)
}

var _ ops.SiTUFFNScratch = (*Backend)(nil)

// SiTUFFNScratchBytes implements ops.SiTUFFNScratch: where every call with these widths runs fused (BF16
// precision on cuBLASLt, bfloat16 weights as the checkpoint's manifest has them, pinned algorithms for
// both shapes: ffnFusable's conditions that do not depend on the call's tensors), a call holds at most one
// block's scratch beside x and its output: x's bfloat16 rows, the float32 gate and up outputs and the
// bfloat16 SiTU output, and SiTU's tables. Elsewhere ok is false: the unfused ops hold every row's.
func (b *Backend) SiTUFFNScratchBytes(hidden, ffn int) (int64, bool) {
	if b.bf != 1 || b.opts.NoTensorCores || b.lt == nil || hidden <= 0 || ffn <= 0 || ffn%8 != 0 {
		return 0, false
	}
	var gu, dn *ltShape
	err := b.ex.Do(func() error {
		var err error
		if gu, err = b.lt.shape(ffn, hidden); err != nil {
			return err
		}
		dn, err = b.lt.shape(hidden, ffn)
		return err
	})
	if err != nil || !gu.ok || !dn.ok || dn.ldb != ffn {
		return 0, false
	}
	block := int64(ffnBlockRows(ffn, b.ffnRows))
	return block*(2*int64(gu.ldb)+(4+4+2)*int64(ffn)) + 4*2*65536, true
}

// SiTUFFN implements ops.SiTUFFN: MatMul(SiTUGLU(MatMul(x, gate), MatMul(x, up), beta, linBeta), down),
// fused as above where it can be, else those ops one after another.
func (b *Backend) SiTUFFN(x, gate, up, down ops.Tensor, beta, linBeta float32) (ops.Tensor, error) {
	const op = "SiTUFFN"
	gu, dn, why, err := b.ffnFusable(x, gate, up, down, beta, linBeta)
	if err != nil {
		return nil, fmt.Errorf("cuda: %s: %w", op, err)
	}
	if why != "" {
		return b.situFFNUnfused(x, gate, up, down, beta, linBeta)
	}
	xt, gt, ut, dt := x.(*Tensor), gate.(*Tensor), up.(*Tensor), down.(*Tensor) // checked by ffnFusable
	n, hidden, ffn := xt.rows, xt.cols, gt.rows
	var out *Tensor
	err = b.run(op, func(c *opCtx) error {
		if c.profiling() { // the profile's key: the gate weight's shape, as MatMul's
			c.detail = fmt.Sprintf("%dx%d", ffn, hidden)
		}
		// x is read by address below (deferred.go), unless its copy serves and holds it (narrow.go)
		if !xt.narrowOnly || xt.narrowLd != gu.ldb {
			if err := c.settle(xt); err != nil {
				return err
			}
		}
		o, err := c.out(n, hidden)
		if err != nil {
			return err
		}
		out = o
		tab, err := c.situTables(beta, linBeta)
		if err != nil {
			return fmt.Errorf("SiTU tables: %w", err)
		}
		block := ffnBlock(n, ffnBlockRows(ffn, c.b.ffnRows))
		var xb uint64 // x's bfloat16 rows: its kept copy (narrow.go) when it has one, else a block's scratch
		if xt.narrow == 0 || xt.narrowLd != gu.ldb {
			if xb, err = c.temp(2 * block * gu.ldb); err != nil {
				return err
			}
		}
		g, err := c.temp(4 * block * ffn)
		if err != nil {
			return err
		}
		u, err := c.temp(4 * block * ffn)
		if err != nil {
			return err
		}
		h, err := c.temp(2 * block * ffn)
		if err != nil {
			return err
		}
		for r0 := 0; r0 < n; r0 += block {
			rn := min(block, n-r0)
			x, xr := xt.ptr+uint64(4*r0*hidden), xb
			if xb == 0 {
				x, xr = 0, xt.narrow+uint64(2*r0*gu.ldb)
			}
			if err := c.ffnRows(gu, dn, out.ptr+uint64(4*r0*hidden), x, xr, g, u, h, tab,
				gt.ptr, ut.ptr, dt.ptr, rn, hidden, ffn); err != nil {
				return fmt.Errorf("rows %d..%d of %d: %w", r0, r0+rn-1, n, err)
			}
		}
		if b.defersRounding() { // like MatMul's, the down projection's rounding is left to its reader (deferred.go)
			out.unrounded = true
			return nil
		}
		return c.roundF32(out.ptr, out.ptr, n*hidden, 1)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ffnRows runs one block of rn rows: x (rn x hidden float32) to y (rn x hidden float32, not yet rounded),
// through the scratch buffers xb, g, u and h (sized for the block). x 0 means xb already holds the rows as
// bfloat16 (the input's kept copy).
func (c *opCtx) ffnRows(gu, dn *ltShape, y, x, xb, g, u, h, tab, gate, up, down uint64, rn, hidden, ffn int) error {
	if x != 0 {
		if err := c.toBF16(xb, x, rn, hidden, gu.ldb); err != nil {
			return fmt.Errorf("x to bfloat16: %w", err)
		}
	}
	if err := c.ltGemm(gu, g, xb, gate, rn, ffn, hidden); err != nil {
		return fmt.Errorf("gate: %w", err)
	}
	if err := c.ltGemm(gu, u, xb, up, rn, ffn, hidden); err != nil {
		return fmt.Errorf("up: %w", err)
	}
	if err := c.launch1D("k_situ_glu_bf16", rn*ffn/4, h, g, u, int64(rn*ffn), tab); err != nil {
		return fmt.Errorf("SiTU: %w", err)
	}
	if err := c.ltGemm(dn, y, h, down, rn, hidden, ffn); err != nil {
		return fmt.Errorf("down: %w", err)
	}
	return nil
}

// ffnFusable returns the pinned plans of the gate/up shape (ffn x hidden) and the down shape (hidden x
// ffn) when the fused path can run the call, else why not ("" when it can). A choice by the precision,
// the options, the weights and their shapes only, never by the number of rows. err is a failed cuBLASLt
// planning call.
func (b *Backend) ffnFusable(x, gate, up, down ops.Tensor, beta, linBeta float32) (gu, dn *ltShape, why string, err error) {
	xt, ok1 := x.(*Tensor)
	gt, ok2 := gate.(*Tensor)
	ut, ok3 := up.(*Tensor)
	dt, ok4 := down.(*Tensor)
	switch {
	case !ok1 || !ok2 || !ok3 || !ok4 || xt == nil || gt == nil || ut == nil || dt == nil ||
		xt.b != b || gt.b != b || ut.b != b || dt.b != b || xt.freed || gt.freed || ut.freed || dt.freed:
		return nil, nil, "an argument is not a live tensor of this backend (the unfused ops say which)", nil
	case b.bf != 1 || b.opts.NoTensorCores || b.lt == nil:
		return nil, nil, "not BF16 precision on cuBLASLt", nil
	case xt.dt != dtF32 || gt.dt != dtBF16 || ut.dt != dtBF16 || dt.dt != dtBF16:
		return nil, nil, "x is not an activation, or a weight is not bfloat16", nil
	case beta == 0 || linBeta == 0:
		return nil, nil, "beta or linBeta is zero (SiTUGLU refuses it)", nil
	}
	n, hidden, ffn := xt.rows, xt.cols, gt.rows
	switch {
	case gt.cols != hidden || ut.rows != ffn || ut.cols != hidden || dt.rows != hidden || dt.cols != ffn:
		return nil, nil, "shapes do not chain (the unfused ops say how)", nil
	case n == 0 || hidden == 0 || ffn == 0:
		return nil, nil, "an empty operand", nil
	case ffn%8 != 0:
		return nil, nil, fmt.Sprintf("width %d is not a multiple of 8 (h's bfloat16 rows are the down GEMM's operand as they lie)", ffn), nil
	case checkDims("SiTUFFN", n, ffn) != nil || checkDims("SiTUFFN", n, hidden) != nil:
		return nil, nil, "too large a tensor (the unfused ops refuse it)", nil
	}
	err = b.ex.Do(func() error {
		var err error
		if gu, err = b.lt.shape(ffn, hidden); err != nil {
			return err
		}
		dn, err = b.lt.shape(hidden, ffn)
		return err
	})
	switch {
	case err != nil:
		return nil, nil, "", err
	case !gu.ok:
		return nil, nil, fmt.Sprintf("no pinned algorithm for the gate/up shape %dx%d: %s", ffn, hidden, gu.why), nil
	case !dn.ok:
		return nil, nil, fmt.Sprintf("no pinned algorithm for the down shape %dx%d: %s", hidden, ffn, dn.why), nil
	case dn.ldb != ffn:
		return nil, nil, fmt.Sprintf("the down plan reads rows of %d values, h has %d", dn.ldb, ffn), nil
	}
	return gu, dn, "", nil
}

// situFFNUnfused runs the four ops of the contract, freeing the intermediates.
func (b *Backend) situFFNUnfused(x, gate, up, down ops.Tensor, beta, linBeta float32) (ops.Tensor, error) {
	g, err := b.MatMul(x, gate)
	if err != nil {
		return nil, fmt.Errorf("SiTUFFN (unfused): gate: %w", err)
	}
	defer b.Free(g)
	u, err := b.MatMul(x, up)
	if err != nil {
		return nil, fmt.Errorf("SiTUFFN (unfused): up: %w", err)
	}
	defer b.Free(u)
	h, err := b.SiTUGLU(g, u, beta, linBeta)
	if err != nil {
		return nil, fmt.Errorf("SiTUFFN (unfused): SiTU: %w", err)
	}
	defer b.Free(h)
	y, err := b.MatMul(h, down)
	if err != nil {
		return nil, fmt.Errorf("SiTUFFN (unfused): down: %w", err)
	}
	return y, nil
}

// situKey identifies SiTU's tables by the bits of beta and linBeta.
type situKey struct{ beta, linBeta uint32 }

// situTables returns the device address of SiTU's two factor tables (2 x 65,536 float32,
// k_experts_situ_tables) for beta and linBeta, filling them on first use; they stay until Close (K3 uses
// one pair: 512 KiB). On the CUDA thread.
func (c *opCtx) situTables(beta, linBeta float32) (uint64, error) {
	b := c.b
	key := situKey{math.Float32bits(beta), math.Float32bits(linBeta)}
	if p, ok := b.situTabs[key]; ok {
		return p, nil
	}
	p, err := b.dv.Malloc(4 * 2 * 65536)
	if err != nil {
		return 0, err
	}
	if err := c.launch("k_experts_situ_tables", d1(2*65536/xThreads), d1(xThreads), 0, p, beta, linBeta); err != nil {
		return 0, errors.Join(err, b.dv.Free(p))
	}
	if b.situTabs == nil {
		b.situTabs = map[situKey]uint64{}
	}
	b.situTabs[key] = p
	return p, nil
}

// releaseSiTUTables frees the cached SiTU tables (at release, before the stream is destroyed).
func (b *Backend) releaseSiTUTables() error {
	var errs []error
	for k, p := range b.situTabs {
		errs = append(errs, b.dv.Free(p))
		delete(b.situTabs, k)
	}
	return errors.Join(errs...)
}
