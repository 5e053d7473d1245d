package cpu

import (
	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Blocking of the matrix product. Only speed depends on these: every output element is one float32
// accumulator that adds x[i,p]*w[j,p] in ascending p whatever the block it falls in (a k panel stores the
// partial sum in out and reloads it, which is exact), so the blocks, the tiles and the thread count never
// change a bit of the result.
const (
	mmRowBlock = 64   // rows of x per task (a multiple of 4)
	mmColBlock = 64   // rows of w per task (a multiple of 4): 64 x mmPanel floats stay in L2
	mmPanel    = 1024 // k per panel: a 4-row tile of x (16 KiB) stays in L1 across the column tiles
)

// MatMul returns out[i,j] = rounded(sum_k x[i,k] * w[j,k]) (x: n x k, w: m x k). The sum is one float32
// accumulator per element running over k in strictly ascending order, each product rounded to float32
// before it is added (no fused multiply-add on any GOARCH): exactly the plain loop
//
//	for i, j: s := float32(0); for p := 0; p < k; p++ { s += float32(x[i,p] * w[j,p]) }; out[i,j] = rounded(s)
//
// The speed comes from register tiles of 4 rows x 2 columns (8 independent accumulators) and cache blocks,
// which reorder only which elements are computed when, never the order within an element.
func (b *Backend) MatMul(x, w ops.Tensor) (ops.Tensor, error) {
	began := b.opStart()
	const op = "MatMul"
	ts, err := tensors(op, []string{"x", "w"}, x, w)
	if err != nil {
		return nil, err
	}
	xt, wt := ts[0], ts[1]
	if xt.cols != wt.cols {
		return nil, shapeErr(op, "x %v times w %v transposed: inner sizes %d and %d differ", xt, wt, xt.cols, wt.cols)
	}
	out := newTensor(xt.rows, wt.rows)
	b.gemm(out.data, xt.data, xt.rows, wt.data, wt.rows, xt.cols, b.bf)
	if err := b.interrupted(op, began); err != nil {
		return nil, err
	}
	return out, nil
}

// gemm sets out (n x m) to x (n x k) times w (m x k) transposed, in the order MatMul documents, rounding
// the outputs to bfloat16 when round is set, in parallel over output blocks.
func (b *Backend) gemm(out, x []float32, n int, w []float32, m, k int, round bool) {
	rb, cb := (n+mmRowBlock-1)/mmRowBlock, (m+mmColBlock-1)/mmColBlock
	b.parallel(rb*cb, func(t int) {
		i0, j0 := (t/cb)*mmRowBlock, (t%cb)*mmColBlock
		gemmBlock(out, x, w, m, k, i0, min(i0+mmRowBlock, n), j0, min(j0+mmColBlock, m), round)
	})
}

// gemmSerial is gemm on the calling goroutine, for callers that parallelise at a coarser grain.
func gemmSerial(out, x []float32, n int, w []float32, m, k int, round bool) {
	for i0 := 0; i0 < n; i0 += mmRowBlock {
		for j0 := 0; j0 < m; j0 += mmColBlock {
			gemmBlock(out, x, w, m, k, i0, min(i0+mmRowBlock, n), j0, min(j0+mmColBlock, m), round)
		}
	}
}

// gemmBlock computes the output block rows [i0,i1) x columns [j0,j1) of an n x m product with inner size k.
func gemmBlock(out, x, w []float32, m, k, i0, i1, j0, j1 int, round bool) {
	for i := i0; i < i1; i++ {
		clear(out[i*m+j0 : i*m+j1])
	}
	for p0 := 0; p0 < k; p0 += mmPanel {
		kn := min(mmPanel, k-p0)
		i := i0
		for ; i+4 <= i1; i += 4 {
			xs := x[i*k+p0:]
			j := j0
			for ; j+2 <= j1; j += 2 {
				tile42(out[i*m+j:], m, xs, k, w[j*k+p0:], k, kn)
			}
			if j < j1 {
				tile41(out[i*m+j:], m, xs, k, w[j*k+p0:], kn)
			}
		}
		for ; i < i1; i++ {
			xs := x[i*k+p0 : i*k+p0+kn]
			j := j0
			for ; j+4 <= j1; j += 4 {
				tile14(out[i*m+j:], xs, w[j*k+p0:], k)
			}
			for ; j < j1; j++ {
				out[i*m+j] = dotAcc(out[i*m+j], xs, w[j*k+p0:])
			}
		}
	}
	if round {
		for i := i0; i < i1; i++ {
			bf16.RoundSlice(out[i*m+j0 : i*m+j1])
		}
	}
}

// tile42 adds the kn-long products of 4 rows of x (stride ldx) and 2 rows of w (stride ldw) into the 4x2
// block of o (stride ldo), each element in ascending p.
func tile42(o []float32, ldo int, x []float32, ldx int, w []float32, ldw, kn int) {
	x0, x1, x2, x3 := x[:kn], x[ldx:ldx+kn], x[2*ldx:2*ldx+kn], x[3*ldx:3*ldx+kn]
	w0, w1 := w[:kn], w[ldw:ldw+kn]
	c00, c01 := o[0], o[1]
	c10, c11 := o[ldo], o[ldo+1]
	c20, c21 := o[2*ldo], o[2*ldo+1]
	c30, c31 := o[3*ldo], o[3*ldo+1]
	for p := range x0 {
		a0, a1, a2, a3 := x0[p], x1[p], x2[p], x3[p]
		b0, b1 := w0[p], w1[p]
		c00 += float32(a0 * b0)
		c01 += float32(a0 * b1)
		c10 += float32(a1 * b0)
		c11 += float32(a1 * b1)
		c20 += float32(a2 * b0)
		c21 += float32(a2 * b1)
		c30 += float32(a3 * b0)
		c31 += float32(a3 * b1)
	}
	o[0], o[1] = c00, c01
	o[ldo], o[ldo+1] = c10, c11
	o[2*ldo], o[2*ldo+1] = c20, c21
	o[3*ldo], o[3*ldo+1] = c30, c31
}

// tile41 is tile42 for a single last column.
func tile41(o []float32, ldo int, x []float32, ldx int, w []float32, kn int) {
	x0, x1, x2, x3 := x[:kn], x[ldx:ldx+kn], x[2*ldx:2*ldx+kn], x[3*ldx:3*ldx+kn]
	w0 := w[:kn]
	c0, c1, c2, c3 := o[0], o[ldo], o[2*ldo], o[3*ldo]
	for p := range x0 {
		b0 := w0[p]
		c0 += float32(x0[p] * b0)
		c1 += float32(x1[p] * b0)
		c2 += float32(x2[p] * b0)
		c3 += float32(x3[p] * b0)
	}
	o[0], o[ldo], o[2*ldo], o[3*ldo] = c0, c1, c2, c3
}

// tile14 adds the products of one row x (len kn) with 4 rows of w (stride ldw) into o[0:4]: the row-tail
// kernel, 4 independent accumulators so that a lone token (a matrix-vector product) still pipelines.
func tile14(o []float32, x []float32, w []float32, ldw int) {
	kn := len(x)
	w0, w1, w2, w3 := w[:kn], w[ldw:ldw+kn], w[2*ldw:2*ldw+kn], w[3*ldw:3*ldw+kn]
	c0, c1, c2, c3 := o[0], o[1], o[2], o[3]
	for p, a := range x {
		c0 += float32(a * w0[p])
		c1 += float32(a * w1[p])
		c2 += float32(a * w2[p])
		c3 += float32(a * w3[p])
	}
	o[0], o[1], o[2], o[3] = c0, c1, c2, c3
}

// dotAcc returns s + sum_p x[p]*w[p] in ascending p, products rounded before the add.
func dotAcc(s float32, x, w []float32) float32 {
	w = w[:len(x)]
	for p, a := range x {
		s += float32(a * w[p])
	}
	return s
}
