package tokenizer

import (
	"container/heap"
	"math"
)

// noRank marks a pair that is not a token (tiktoken's Rank::MAX).
const noRank = math.MaxInt32

// smallPiece is the length up to which appendBPE uses tiktoken's own quadratic loop on a stack buffer;
// longer pieces (long words, runs of punctuation or spaces up to MaxRunChars) use a heap.
const smallPiece = 128

// part is one boundary of the piece being merged: the byte where a part starts and the rank of the
// concatenation of that part and the next (noRank when it is not a token).
type part struct {
	start, rank int32
}

// rank returns the id of bytes s, or noRank.
func (t *Tokenizer) rank(s string) int32 {
	if id, ok := t.ranks[s]; ok {
		return id
	}
	return noRank
}

// appendBPE appends the BPE encoding of piece to dst. This is tiktoken's byte_pair_merge: start from
// single bytes and repeatedly merge the adjacent pair whose concatenation has the lowest rank, the
// leftmost one on ties, until no adjacent pair is a token. Every final part is a token because every
// single byte is.
func (t *Tokenizer) appendBPE(dst []int32, piece string) []int32 {
	if len(piece) == 1 {
		return append(dst, t.ranks[piece])
	}
	if len(piece) > smallPiece {
		return t.appendBPELarge(dst, piece)
	}
	var buf [smallPiece + 1]part
	parts := buf[:0]
	for i := 0; i < len(piece)-1; i++ {
		parts = append(parts, part{int32(i), t.rank(piece[i : i+2])})
	}
	parts = append(parts, part{int32(len(piece) - 1), noRank}, part{int32(len(piece)), noRank})
	// rankAt is the rank of parts i and i+1 merged, as if parts[i+1] were already gone: tiktoken updates
	// the neighbours before it removes the merged boundary, hence i+3.
	rankAt := func(i int) int32 {
		if i+3 < len(parts) {
			return t.rank(piece[parts[i].start:parts[i+3].start])
		}
		return noRank
	}
	for {
		best, bestRank := -1, int32(noRank)
		for i := 0; i < len(parts)-1; i++ {
			if parts[i].rank < bestRank {
				best, bestRank = i, parts[i].rank
			}
		}
		if best < 0 {
			break
		}
		if best > 0 {
			parts[best-1].rank = rankAt(best - 1)
		}
		parts[best].rank = rankAt(best)
		parts = append(parts[:best+1], parts[best+2:]...)
	}
	for i := 0; i < len(parts)-1; i++ {
		dst = append(dst, t.ranks[piece[parts[i].start:parts[i+1].start]])
	}
	return dst
}

// appendBPELarge computes the same merges as appendBPE in O(n log n): the parts form a linked list and a
// heap orders the candidate pairs by (rank, start), which is the order of tiktoken's scan (lowest rank,
// then leftmost). Heap entries that no longer match their part are skipped when popped.
func (t *Tokenizer) appendBPELarge(dst []int32, piece string) []int32 {
	n := len(piece)
	start := make([]int32, n+1) // start[i] == -1 once part i is merged into its left neighbour
	next := make([]int32, n+1)
	prev := make([]int32, n+1)
	rank := make([]int32, n+1)
	h := make(pairHeap, 0, n)
	for i := 0; i <= n; i++ {
		start[i], next[i], prev[i], rank[i] = int32(i), int32(i+1), int32(i-1), noRank
	}
	// pairRank is the rank of part i merged with the part after it.
	pairRank := func(i int32) int32 {
		j := next[i]
		if j >= int32(n) {
			return noRank
		}
		return t.rank(piece[start[i]:start[next[j]]])
	}
	for i := int32(0); i < int32(n-1); i++ {
		if rank[i] = pairRank(i); rank[i] != noRank {
			h = append(h, pairEntry{rank[i], i})
		}
	}
	heap.Init(&h)
	for h.Len() > 0 {
		e := heap.Pop(&h).(pairEntry)
		i := e.start
		if start[i] < 0 || rank[i] != e.rank {
			continue // stale
		}
		j := next[i]
		start[j] = -1
		next[i] = next[j]
		prev[next[j]] = i
		if rank[i] = pairRank(i); rank[i] != noRank {
			heap.Push(&h, pairEntry{rank[i], i})
		}
		if p := prev[i]; p >= 0 {
			if rank[p] = pairRank(p); rank[p] != noRank {
				heap.Push(&h, pairEntry{rank[p], p})
			}
		}
	}
	for i := int32(0); i < int32(n); i = next[i] {
		dst = append(dst, t.ranks[piece[start[i]:start[next[i]]]])
	}
	return dst
}

// pairEntry is a candidate merge of the part starting at byte start with its right neighbour.
type pairEntry struct {
	rank, start int32
}

// pairHeap is a min-heap by (rank, start).
type pairHeap []pairEntry

func (h pairHeap) Len() int { return len(h) }
func (h pairHeap) Less(i, j int) bool {
	return h[i].rank < h[j].rank || (h[i].rank == h[j].rank && h[i].start < h[j].start)
}
func (h pairHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pairHeap) Push(x any)   { *h = append(*h, x.(pairEntry)) }
func (h *pairHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
