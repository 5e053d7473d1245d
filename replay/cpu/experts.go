package cpu

import (
	"sort"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// Work division of ExpertsAccumulate. Only speed and memory depend on these: each (row, expert) output is
// computed on its own and the rows add their experts in ascending id after every batch.
const (
	expertTile      = 32   // rows of one expert per task
	expertBatchRows = 2048 // (row, expert) outputs held at once, unless one expert alone has more
)

// runExperts computes the experts' outputs batch by batch (ascending id) and adds them into acc.
func (b *Backend) runExperts(acc, z []float32, latent int, es []*Expert, work []ops.ExpertRows, beta, linBeta float32) {
	type task struct{ e, r0, r1, off int } // rows r0..r1-1 of work[e]; their outputs start at row off of h
	for e0 := 0; e0 < len(es); {
		e1, total := e0, 0
		for e1 < len(es) && (e1 == e0 || total+len(work[e1].Rows) <= expertBatchRows) {
			total += len(work[e1].Rows)
			e1++
		}
		h := make([]float32, total*latent)
		offs := make([]int, e1-e0)
		var tasks []task
		off := 0
		for e := e0; e < e1; e++ {
			offs[e-e0] = off
			for r0 := 0; r0 < len(work[e].Rows); r0 += expertTile {
				r1 := min(r0+expertTile, len(work[e].Rows))
				tasks = append(tasks, task{e, r0, r1, off + r0})
			}
			off += len(work[e].Rows)
		}
		run := func(t task, par bool) {
			b.expertForward(es[t.e], z, work[t.e].Rows[t.r0:t.r1], h[t.off*latent:(t.off+t.r1-t.r0)*latent], beta, linBeta, par)
		}
		if len(tasks) >= b.threads { // enough tasks: one goroutine each
			b.parallel(len(tasks), func(i int) { run(tasks[i], false) })
		} else { // few tasks: parallelise inside the matrix products instead
			for _, t := range tasks {
				run(t, true)
			}
		}
		// Each row adds its experts in ascending id; rows are independent, so split them.
		b.parallelRange(len(acc)/latent, 64, func(lo, hi int) {
			for e := e0; e < e1; e++ {
				rs, ws := work[e].Rows, work[e].Weights
				for i := sort.Search(len(rs), func(i int) bool { return int(rs[i]) >= lo }); i < len(rs) && int(rs[i]) < hi; i++ {
					r := int(rs[i])
					a, hr, w := acc[r*latent:(r+1)*latent], h[(offs[e-e0]+i)*latent:][:latent], ws[i]
					for d, x := range hr {
						a[d] += float32(w * x)
					}
				}
			}
		})
		e0 = e1
	}
}

// expertForward writes h[i,:] = rounded(W2 rounded(situ(rounded(W1 z[rows[i]]), rounded(W3 z[rows[i]]))))
// for the given rows, with the MatMul and SiTUGLU loops; par selects the parallel matrix product.
func (b *Backend) expertForward(e *Expert, z []float32, rows []int32, h []float32, beta, linBeta float32, par bool) {
	n, latent, ffn := len(rows), e.latent, e.ffn
	mm := gemmSerial
	if par {
		mm = b.gemm
	}
	zr := make([]float32, n*latent)
	for i, r := range rows {
		copy(zr[i*latent:(i+1)*latent], z[int(r)*latent:])
	}
	gate, up := make([]float32, n*ffn), make([]float32, n*ffn)
	mm(gate, zr, n, e.w1, ffn, latent, b.bf)
	mm(up, zr, n, e.w3, ffn, latent, b.bf)
	b.situRange(gate, gate, up, beta, linBeta) // in place: element i reads only gate[i] and up[i]
	mm(h, gate, n, e.w2, latent, ffn, b.bf)
}
