package cuda

import (
	"fmt"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Launch parameters. matmul.cu (version 1, CUDA cores): 256 threads a block, each block one 64 x 64 tile
// of the output, gridDim (ceil(m/64), ceil(n/64)). matmul_tc.cu (version 2, tensor cores): 256 threads a
// block, 128 x 128 tiles, gridDim (ceil(m/128), ceil(n/128)). gridDim.y is at most 65535, so one launch
// covers at most 65535 tiles of rows and larger n is split into launches of whole tiles (rows are
// independent, so the split changes no bit).
const (
	mmTile    = 64
	tcTile    = 128
	mmThreads = 256
	maxGridY  = 65535
)

// weightRef is a weight operand of the matmul kernels: its device address, storage and, for MXFP4, the
// scales and the bytes per row of each part.
type weightRef struct {
	kernel         string // k_matmul_f32, k_matmul_bf16 or k_matmul_mxfp4
	tc             string // the tensor-core kernel for this weight type, or "" (float32 weights)
	tcVec          string // its vectorised form (version 3), for k a multiple of vecK and aligned operands
	vecK           int
	lt             bool // a bfloat16 weight: cuBLASLt may run it (cublaslt_plan.go)
	ptr, scales    uint64
	rows, k        int
	packRow, scRow int
}

// weightOf describes a Tensor as a matmul weight.
func weightOf(t *Tensor) weightRef {
	if t.dt == dtBF16 {
		return weightRef{kernel: "k_matmul_bf16", tc: "k_matmul_tc_bf16", tcVec: "k_matmul_tc_bf16_vec", vecK: 8, lt: true,
			ptr: t.ptr, rows: t.rows, k: t.cols}
	}
	return weightRef{kernel: "k_matmul_f32", ptr: t.ptr, rows: t.rows, k: t.cols}
}

// gemm launches out (n x m float32) = x (n x k float32) times w^T, rounding the outputs when round is set.
// Products in BF16 precision with a bfloat16 weight, rounded or not, run on cuBLASLt with the weight
// shape's pinned algorithm when the backend has cuBLASLt and the shape has one (cublaslt_plan.go; x holds
// bfloat16 values in that precision, so its conversion is exact); the other rounded products in BF16
// precision with a bfloat16 or MXFP4 weight run on the tensor cores (versions 2 and 3) unless
// Options.NoTensorCores; everything else on the CUDA cores (version 1). The choice depends on the
// precision, the weight, its shape and the options only, never on n.
func (c *opCtx) gemm(out, x uint64, n int, w weightRef, round bool) error {
	var bf int32
	if round {
		bf = c.b.bf
	}
	kernel, tile := w.kernel, mmTile
	tensorCores := c.b.bf == 1 && w.tc != "" && !c.b.opts.NoTensorCores
	if tensorCores && w.lt && c.b.lt != nil {
		s, err := c.b.lt.shape(w.rows, w.k)
		if err != nil {
			return err
		}
		if s.ok {
			return c.gemmLt(s, out, x, n, w, round)
		}
	}
	// the kernels below read x as float32: a narrow-only x's values first (narrow.go)
	if _, ok := c.xsrc.rowOf(x, n, w.k); ok {
		if err := c.widen(c.xsrc); err != nil {
			return err
		}
	}
	if tensorCores {
		if !round {
			// unrounded sums (the router's logits) without cuBLASLt stay on the CUDA cores' ascending
			// order, the CPU backend's bits
			return c.gemmKernel(kernel, tile, out, x, n, w, bf)
		}
		kernel, tile = w.tc, tcTile
		if w.tcVec != "" && w.k%w.vecK == 0 && x%16 == 0 && w.ptr%16 == 0 {
			kernel = w.tcVec // version 3: the same bits as version 2, faster
		}
	}
	return c.gemmKernel(kernel, tile, out, x, n, w, bf)
}

// gemmLt runs gemm on cuBLASLt: x converted to a bfloat16 temporary (convert.cu), or, for rows of the
// tensor c.xsrc, its kept bfloat16 copy (narrow.go), out = x_bf16 w^T with
// float32 accumulation by the shape's pinned algorithm, then, when round is set, every output rounded to
// bfloat16 in place (k_round), so the contract holds: bfloat16 values in float32 storage, unless c.deferRound
// leaves that to the output's reader (deferred.go; it then sets c.deferred). cuBLASLt is column-major: it
// computes out^T (m x n, ld m) = W (k x m column-major, transposed) times x^T (k x n, ld ldb). n is
// covered by calls of at most ltCallRows(m, k) rows (operands within the range the plan was checked
// for; cublaslt_plan.go), which changes no bit: a row's sum does not depend on the call it falls in.
func (c *opCtx) gemmLt(s *ltShape, out, x uint64, n int, w weightRef, round bool) error {
	m, k := w.rows, w.k
	if n == 0 {
		return nil
	}
	var xb uint64
	if row, ok := c.xsrc.rowOf(x, n, k); ok {
		var err error
		if xb, err = c.narrowOf(c.xsrc, s.ldb); err != nil {
			return err
		}
		xb += uint64(2 * s.ldb * row)
	} else {
		var err error
		if xb, err = c.temp(2 * s.ldb * n); err != nil {
			return err
		}
		if err := c.toBF16(xb, x, n, k, s.ldb); err != nil {
			return err
		}
	}
	if err := c.ltGemm(s, out, xb, w.ptr, n, m, k); err != nil || !round {
		return err
	}
	if c.deferRound { // MatMul's output: its reader rounds it (deferred.go)
		c.deferred = true
		return nil
	}
	return c.roundF32(out, out, n*m, 1)
}

// ltGemm runs out (n x m float32, unrounded) = xb (n x k bfloat16, rows s.ldb apart) times w^T (m x k
// bfloat16) with shape s's pinned algorithm, in calls of at most ltCallRows(m, k) rows.
func (c *opCtx) ltGemm(s *ltShape, out, xb, w uint64, n, m, k int) error {
	if out%ltAlign != 0 || xb%ltAlign != 0 || w%ltAlign != 0 {
		// never: operands are pool allocations at aligned offsets; a misaligned one is a bug, not a
		// reason to switch kernels (which would change a row's bits)
		return fmt.Errorf("%w: cuBLASLt operands not %d-byte aligned (out %#x, x %#x, weight %#x)", ErrInternal, ltAlign, out, xb, w)
	}
	step := ltCallRows(m, k) // a multiple of 4 (plan refuses shapes where it is not, and odd m with bfloat16 outputs): every call's out is 16-byte aligned
	for r0 := 0; r0 < n; r0 += step {
		rn := min(step, n-r0)
		strm, ws := c.ltStream()
		if err := c.b.lt.matmul(s, strm, ws, out+uint64(s.outBytes()*r0*m), xb+uint64(2*r0*s.ldb), w, rn, m, k); err != nil {
			return err
		}
	}
	return nil
}

// ltStream is the stream a cuBLASLt call of the op goes to and the workspace that stream's calls use: a
// side stream's own (cuda/device/streams.go), or the backend's stream and the handle's.
func (c *opCtx) ltStream() (strm uintptr, ws uint64) {
	if c.side != nil {
		return c.side.Stream, c.side.Scratch
	}
	return c.b.dv.Stream, c.b.lt.ws
}

// gemmKernel launches one matmul kernel (tile: its rows and columns per block) over n rows.
func (c *opCtx) gemmKernel(kernel string, tile int, out, x uint64, n int, w weightRef, bf int32) error {
	m, k := w.rows, w.k
	for r0 := 0; r0 < n; r0 += maxGridY * tile {
		rn := min(maxGridY*tile, n-r0)
		err := c.launch(kernel, d2((m+tile-1)/tile, (rn+tile-1)/tile), d1(mmThreads), 0,
			out+uint64(4*r0*m), x+uint64(4*r0*k), w.ptr, w.scales, int64(rn), int32(m), int32(k), int32(w.packRow), int32(w.scRow), bf)
		if err != nil {
			return err
		}
	}
	return nil
}

// MatMul returns x times w transposed, out[i,j] = rounded(sum_k x[i,k] * w[j,k]), one float32 accumulator
// per element. In FP32 precision, and for float32 weights, it runs on the CUDA cores over k in ascending
// order with products rounded before the add (matmul.cu version 1): the CPU backend's loop, bit for bit.
// In BF16 precision with a bfloat16 weight it runs on cuBLASLt (Options.CuBLASLt) with the algorithm
// pinned for the weight's shape: exact bf16 products summed in float32 in that kernel's fixed order, no
// split of k; shapes no algorithm fits for every n, and CuBLASLtOff, run on the tensor cores (matmul_tc.cu
// versions 2 and 3, which give the same bits: k chunks of 16 in ascending order). Both differ from the
// CPU backend at float32 rounding level (Options.NoTensorCores keeps version 1). Either way no element
// depends on the number of rows. w may be a bfloat16 or float32 weight (read as stored) or an activation.
// On cuBLASLt the output's rounding is deferred to its reader (deferred.go): the same values, one pass
// over the output fewer.
func (b *Backend) MatMul(x, w ops.Tensor) (ops.Tensor, error) {
	const op = "MatMul"
	ts, err := b.tensors(op, []string{"x", "w"}, x, w)
	if err != nil {
		return nil, err
	}
	xt, wt := ts[0], ts[1]
	if xt.cols != wt.cols {
		return nil, shapeErr(op, "x %v times w %v transposed: inner sizes %d and %d differ", xt, wt, xt.cols, wt.cols)
	}
	if err := checkDims(op, xt.rows, wt.rows); err != nil {
		return nil, err
	}
	var out *Tensor
	err = b.run(op, func(c *opCtx) error {
		if c.profiling() { // the profile's key: the weight's shape (its dtype unless bfloat16, the common case)
			c.detail = fmt.Sprintf("%dx%d", wt.rows, wt.cols)
			if wt.dt != dtBF16 {
				c.detail += " f32"
			}
		}
		xp, err := c.xaddr(xt) // gemm reads a narrow-only x's copy (narrow.go)
		if err != nil {
			return err
		}
		if out, err = c.out(xt.rows, wt.rows); err != nil || out.n() == 0 {
			return err
		}
		if xt.cols == 0 { // an empty sum: zeros
			return b.drv.Check("cuMemsetD32Async", bind.Call(b.drv.CuMemsetD32Async, uintptr(out.ptr), 0, uintptr(out.n()), b.dv.Stream))
		}
		c.xsrc, c.deferRound = xt, b.defersRounding()
		if err := c.gemm(out.ptr, xp, xt.rows, weightOf(wt), true); err != nil {
			return err
		}
		out.unrounded = c.deferred
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
