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

// expertRows are the rows (ascending) that chose one expert, and their routing weights.
type expertRows struct {
	rows    []int
	weights []float32
}

// assign lists, for each expert of es (sorted by id), the rows that chose it. A row that lists one of
// them twice is an error.
func assign(op string, es []*Expert, rt ops.Routing, rows int) ([]expertRows, error) {
	index := make(map[int32]int, len(es))
	for i, e := range es {
		index[int32(e.id)] = i
	}
	work := make([]expertRows, len(es))
	for r := range rows {
		for j := range rt.K {
			i, ok := index[rt.IDs[r*rt.K+j]]
			if !ok {
				continue
			}
			w := &work[i]
			if n := len(w.rows); n > 0 && w.rows[n-1] == r {
				return nil, argErr(op, "row %d chose expert %d twice", r, es[i].id)
			}
			w.rows = append(w.rows, r)
			w.weights = append(w.weights, rt.Weights[r*rt.K+j])
		}
	}
	return work, nil
}

// runExperts computes the experts' outputs batch by batch (ascending id) and adds them into acc.
func (b *Backend) runExperts(acc, z []float32, latent int, es []*Expert, work []expertRows, beta, linBeta float32) {
	type task struct{ e, r0, r1, off int } // rows r0..r1-1 of work[e]; their outputs start at row off of h
	for e0 := 0; e0 < len(es); {
		e1, total := e0, 0
		for e1 < len(es) && (e1 == e0 || total+len(work[e1].rows) <= expertBatchRows) {
			total += len(work[e1].rows)
			e1++
		}
		h := make([]float32, total*latent)
		offs := make([]int, e1-e0)
		var tasks []task
		off := 0
		for e := e0; e < e1; e++ {
			offs[e-e0] = off
			for r0 := 0; r0 < len(work[e].rows); r0 += expertTile {
				r1 := min(r0+expertTile, len(work[e].rows))
				tasks = append(tasks, task{e, r0, r1, off + r0})
			}
			off += len(work[e].rows)
		}
		run := func(t task, par bool) {
			b.expertForward(es[t.e], z, work[t.e].rows[t.r0:t.r1], h[t.off*latent:(t.off+t.r1-t.r0)*latent], beta, linBeta, par)
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
				rs, ws := work[e].rows, work[e].weights
				for i := sort.SearchInts(rs, lo); i < len(rs) && rs[i] < hi; i++ {
					a, hr, w := acc[rs[i]*latent:(rs[i]+1)*latent], h[(offs[e-e0]+i)*latent:][:latent], ws[i]
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
func (b *Backend) expertForward(e *Expert, z []float32, rows []int, h []float32, beta, linBeta float32, par bool) {
	n, latent, ffn := len(rows), e.latent, e.ffn
	mm := gemmSerial
	if par {
		mm = b.gemm
	}
	zr := make([]float32, n*latent)
	for i, r := range rows {
		copy(zr[i*latent:(i+1)*latent], z[r*latent:])
	}
	gate, up := make([]float32, n*ffn), make([]float32, n*ffn)
	mm(gate, zr, n, e.w1, ffn, latent, b.bf)
	mm(up, zr, n, e.w3, ffn, latent, b.bf)
	b.situRange(gate, gate, up, beta, linBeta) // in place: element i reads only gate[i] and up[i]
	mm(h, gate, n, e.w2, latent, ffn, b.bf)
}
