package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// A strided batch of matmuls on cuBLASLt: out_i (n x m bfloat16, rows ldd apart) = x (n x k bfloat16)
// times w_i^T for i < count, the weights w_i strideW elements apart, one x for all (batch stride 0), the
// outputs strideD elements apart. MLA expands its keys and values this way (mla_latent.go): one call
// writes a group of heads' keys straight into the per-head arrays its kernels read. The plan is the dense
// matmuls' (cublaslt_plan.go): split-K 1, no reduction, checked at every probe row count up to a call's
// most, so an output element is one block's float32 accumulator over k in the kernel's fixed order,
// rounded once to bfloat16 by the epilogue, whatever n, the call or the batch it falls in.

// ltBatchRows is the most rows of x one batched call takes: 16,384 rows of K3's 512-wide latent are 16
// MB of bfloat16, which can stay in the L2 while every matrix of the batch reads it, where a whole
// slice's latent (67 MB at 65,536 rows) would be read from memory again for each (not measured apart:
// the whole op is, TestMLALatentTiming).
const ltBatchRows = 16384

// ltBatching is a batched shape's layout: the output's leading dimension, the weights' batch stride,
// and the batch count the plan was made and checked for (every call uses it).
type ltBatching struct {
	ldd     int
	strideW int64
	count   int
}

// ltBatchKey is a batched shape: ltKey's m and k with the batching (bfloat16 outputs always).
type ltBatchKey struct {
	m, k int
	ltBatching
}

// batchShape returns the plan of a batched shape, making it on first use; ok false (with the reason)
// when no configuration passes every check. m must be even and ldd >= m.
func (h *ltHandle) batchShape(m, k int, bt ltBatching) (*ltShape, error) {
	key := ltBatchKey{m, k, bt}
	if s, ok := h.batches[key]; ok {
		return s, nil
	}
	s := &ltShape{ldb: (k + 7) &^ 7, out: bind.R16BF, batch: &bt}
	switch {
	case m%2 != 0 || bt.ldd < m || bt.ldd%8 != 0 || bt.count < 1 || bt.strideW%8 != 0:
		s.why = fmt.Sprintf("a batch of %d outputs a row at %d apart, weights %d apart: not 16-byte aligned", m, bt.ldd, bt.strideW)
	default:
		var err error
		if s.adesc, err = h.layout(bind.R16BF, k, m, k); err == nil {
			err = h.batchLayout(s.adesc, bt.count, bt.strideW)
		}
		if err == nil {
			s, err = h.pinFirst(s, m, k, ltBatchProbes())
		}
		if err != nil {
			return nil, fmt.Errorf("cuBLASLt plan for a batch of %d %dx%d weights: %w", bt.count, m, k, err)
		}
	}
	h.batches[key] = s
	return s, nil
}

// ltBatchProbes are the row counts a batched plan is checked at: ltProbeN below ltBatchRows, and it.
func ltBatchProbes() []int {
	var out []int
	for _, n := range ltProbeN {
		if n < ltBatchRows {
			out = append(out, n)
		}
	}
	return append(out, ltBatchRows)
}

// batchLayout makes layout p a batch of count matrices stride elements apart.
func (h *ltHandle) batchLayout(p uintptr, count int, stride int64) error {
	c := int32(count)
	return errors.Join(
		h.lib.Check("cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)", bind.Call(h.lib.MatrixLayoutSetAttribute, p, bind.LtLayoutBatchCount, uintptr(unsafe.Pointer(&c)), 4)),
		h.lib.Check("cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)", bind.Call(h.lib.MatrixLayoutSetAttribute, p, bind.LtLayoutStridedBatchOffset, uintptr(unsafe.Pointer(&stride)), 8)))
}

// batchIO creates a batched shape's layouts of x (k x n, ld ldb, batch stride 0) and of the outputs
// (m x n, ld ldd, strideD apart), count matrices each.
func (h *ltHandle) batchIO(s *ltShape, m, k, n, count int, strideD int64) (bdesc, ddesc uintptr, err error) {
	if bdesc, err = h.layout(bind.R16BF, k, n, s.ldb); err != nil {
		return 0, 0, err
	}
	if err = h.batchLayout(bdesc, count, 0); err == nil {
		if ddesc, err = h.layout(s.out, m, n, s.batch.ldd); err == nil {
			err = h.batchLayout(ddesc, count, strideD)
		}
	}
	if err != nil {
		return 0, 0, errors.Join(err, h.dropLayout(bdesc), h.dropLayout(ddesc))
	}
	return bdesc, ddesc, nil
}

// batchGemm runs batched shape s over n rows of xb (bfloat16, rows s.ldb apart) on the op's stream:
// out_i = xb times w_i^T (w_i at w + i strideW elements), out_i at d + i strideD elements, in calls of
// at most ltBatchRows rows.
func (c *opCtx) batchGemm(s *ltShape, d, xb, w uint64, n, m, k int, strideD int64) error {
	if d%ltAlign != 0 || xb%ltAlign != 0 || w%ltAlign != 0 || strideD%8 != 0 {
		return fmt.Errorf("%w: batched cuBLASLt operands not %d-byte aligned (out %#x, stride %d, x %#x, weight %#x)", ErrInternal, ltAlign, d, strideD, xb, w)
	}
	strm, ws := c.ltStream()
	for r0 := 0; r0 < n; r0 += ltBatchRows {
		rn := min(ltBatchRows, n-r0)
		if err := c.b.lt.matmulBatch(s, strm, ws, d+uint64(2*r0*s.batch.ldd), xb+uint64(2*r0*s.ldb), w, rn, m, k, strideD); err != nil {
			return err
		}
	}
	return nil
}

// matmulBatch enqueues one batched call of shape s on stream strm (matmul's counterpart).
func (h *ltHandle) matmulBatch(s *ltShape, strm uintptr, ws, d, xb, w uint64, n, m, k int, strideD int64) (err error) {
	bdesc, ddesc, err := h.batchIO(s, m, k, n, s.batch.count, strideD)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, h.dropLayout(bdesc), h.dropLayout(ddesc)) }()
	return h.enqueue(s, strm, ws, d, xb, w, bdesc, ddesc, fmt.Sprintf("cublasLtMatmul(batch of %d: %dx%d by %dx%d)", s.batch.count, n, k, m, k))
}
