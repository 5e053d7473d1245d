package cuda

import (
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// The host side of a grouped expert call: the tables its kernels read, laid out before the op's closure
// runs. A pooled MoE layer's first call is planned after the router's last slice, with the device
// waiting, over about 600,000 (row, expert) pairs at 262,144 tokens: 25 ms serial on the development
// machine (docs/records/run55), so the scans over rows run in parts on several goroutines.

// groupedPlan is the host side of one grouped call: every table the kernels read, in one int32 buffer
// uploaded at once (one copy a call, through the upload ring).
type groupedPlan struct {
	experts int   // experts in the call (the pointer table's length)
	rows    int   // rows of the gathered buffer: the sum of the experts' rows
	tiles   int   // row tiles: ceil(rows_e / tile rows) summed over the experts
	touched int   // accumulator rows that receive at least one expert output
	entries int   // (row, expert) pairs, = rows
	counts  []int // rows of each expert, in the call's order (ascending id)
	nonzero []int // the experts with rows, by index, ascending (the cuBLASLt path's decode list)
	buf     []int32
	// int32 offsets into buf: the pointer table (6 uint64 an expert), the tile table (int4: expert index,
	// first row, rows, 0), the gathered rows' indices into z, and the combine's CSR: rowptr (touched+1),
	// rowid (touched), pos (entries) and weights (entries, float32 bits), then the nonzero list
	offTiles, offRows, offRowPtr, offRowID, offPos, offW, offList int
}

// planPairsPerPart is the fewest (row, expert) pairs a part of the plan takes: below it a part's goroutine
// costs more than its share of the scans.
const planPairsPerPart = 32768

// planGroupedTiles lays out the call: expert i (ascending id) owns gathered rows first_i .. first_i+n_i-1
// in the order work[i] lists them; each accumulator row's entries are listed in ascending expert id, so
// the combine adds them in the per-expert path's order. Row tiles hold at most tileRows rows (the wgmma
// kernels take 256).
func planGroupedTiles(es []*Expert, work []ops.ExpertRows, accRows, tileRows int) groupedPlan {
	pairs := 0
	for i := range work {
		pairs += len(work[i].Rows)
	}
	return planGroupedParts(es, work, accRows, tileRows, min(runtime.GOMAXPROCS(0), max(pairs/planPairsPerPart, 1)))
}

// planGroupedParts is planGroupedTiles with the accumulator's rows cut into that many ranges, each
// counted and listed by its own goroutine: every expert's rows ascend (ops.AssignRows), so a range's
// share of each expert's list is one span of it, and the tables are the same whatever the parts.
func planGroupedParts(es []*Expert, work []ops.ExpertRows, accRows, tileRows, parts int) groupedPlan {
	p := groupedPlan{experts: len(es), counts: make([]int, len(work))}
	firsts := make([]int, len(work)) // expert i's first gathered row
	n := 0
	for i := range work {
		p.counts[i] = len(work[i].Rows)
		if p.counts[i] > 0 {
			p.nonzero = append(p.nonzero, i)
		}
		firsts[i] = n
		n += len(work[i].Rows)
		p.tiles += (len(work[i].Rows) + tileRows - 1) / tileRows
	}
	p.rows, p.entries = n, n
	parts = max(min(parts, accRows), 1)
	lo := func(q int) int { return q * accRows / parts } // range q is accumulator rows lo(q) .. lo(q+1)-1
	// cut[q][i]: the first of work[i].Rows at or past lo(q) (cut[parts][i]: past the last)
	cut := make([][]int, parts+1)
	for q := range cut {
		cut[q] = make([]int, len(work))
		for i := range work {
			if q == parts {
				cut[q][i] = len(work[i].Rows)
			} else {
				cut[q][i], _ = slices.BinarySearch(work[i].Rows, int32(lo(q)))
			}
		}
	}
	each := func(fn func(q int)) {
		var wg sync.WaitGroup
		for q := range parts {
			wg.Go(func() { fn(q) })
		}
		wg.Wait()
	}
	// count[r]: row r's entries; range q's touched rows and entries
	count := make([]int32, accRows)
	touched, entries := make([]int, parts+1), make([]int, parts+1) // then: those of the ranges before q
	each(func(q int) {
		for i := range work {
			for _, r := range work[i].Rows[cut[q][i]:cut[q+1][i]] {
				count[r]++
			}
		}
		for _, c := range count[lo(q):lo(q+1)] {
			if c > 0 {
				touched[q+1]++
				entries[q+1] += int(c)
			}
		}
	})
	for q := range parts {
		touched[q+1] += touched[q]
		entries[q+1] += entries[q]
	}
	p.touched = touched[parts]
	// the layout: pointers, tiles, gathered rows, rowptr, rowid, pos, weights, nonzero list
	p.offTiles = 12 * len(es) // a multiple of 4, so the int4 table is 16-byte aligned
	p.offRows = p.offTiles + 4*p.tiles
	p.offRowPtr = p.offRows + n
	p.offRowID = p.offRowPtr + p.touched + 1
	p.offPos = p.offRowID + p.touched
	p.offW = p.offPos + n
	p.offList = p.offW + n
	buf := make([]int32, p.offList+len(p.nonzero))
	for i, e := range es {
		for j := range 6 {
			v := e.ptr + uint64(e.off[j])
			buf[12*i+2*j], buf[12*i+2*j+1] = int32(uint32(v)), int32(uint32(v>>32))
		}
	}
	t := p.offTiles
	for i := range work {
		m := len(work[i].Rows)
		for t0 := 0; t0 < m; t0 += tileRows {
			copy(buf[t:], []int32{int32(i), int32(firsts[i] + t0), int32(min(tileRows, m-t0)), 0})
			t += 4
		}
		copy(buf[p.offRows+firsts[i]:], work[i].Rows)
	}
	// The combine's CSR by accumulator row, range by range: next[r] is the slot of row r's next entry.
	rowptr, rowid := buf[p.offRowPtr:p.offRowID], buf[p.offRowID:p.offPos]
	pos, wts := buf[p.offPos:p.offW], buf[p.offW:p.offList]
	next := make([]int32, accRows)
	each(func(q int) {
		k, at := touched[q], int32(entries[q])
		for r := lo(q); r < lo(q+1); r++ {
			if c := count[r]; c > 0 {
				next[r] = at
				at += c
				rowptr[k+1], rowid[k] = at, int32(r)
				k++
			}
		}
		for i := range work { // ascending expert id: each row's entries come out in that order
			for j := cut[q][i]; j < cut[q+1][i]; j++ {
				r := work[i].Rows[j]
				s := next[r]
				next[r]++
				pos[s] = int32(firsts[i] + j)
				wts[s] = int32(math.Float32bits(work[i].Weights[j]))
			}
		}
	})
	for k, i := range p.nonzero {
		buf[p.offList+k] = int32(i)
	}
	p.buf = buf
	return p
}
