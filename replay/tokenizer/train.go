package tokenizer

import (
	"container/heap"
	"fmt"
	"iter"
	"sort"
	"strings"
)

// Train learns a byte-level BPE vocabulary of at most numBPE tokens from docs, in tiktoken's rank order:
// the 256 single bytes first (rank = byte value), then one token per merge in the order learned. Each
// document is pre-tokenized with the K3 splitter (Pieces), so no token crosses a piece boundary.
//
// Each step merges the adjacent pair of tokens with the highest count over the corpus (ties: the
// smaller left id, then the smaller right id), so the first k tokens of a longer run are the result of a
// shorter one. When the merged bytes already are a token (two different pairs can spell the same
// bytes) the pair merges into that token and no token is added. Training stops early, returning fewer
// tokens, once no pair occurs twice; Pad extends a vocabulary to an exact size.
func Train(docs iter.Seq[string], numBPE int) ([]string, error) {
	if numBPE < 256 {
		return nil, fmt.Errorf("tokenizer: train: %d tokens is fewer than the 256 single bytes", numBPE)
	}
	tr := newTrainer(docs)
	for len(tr.tokens) < numBPE && tr.step() {
	}
	return tr.tokens, nil
}

// pairKey packs a (left, right) pair of token ids; its natural order is the tie-break order.
type pairKey uint64

func pack(a, b int32) pairKey { return pairKey(uint64(a)<<32 | uint64(uint32(b))) }

type trainWord struct {
	syms  []int32
	count int64
}

type trainer struct {
	tokens []string
	ids    map[string]int32
	words  []trainWord
	counts map[pairKey]int64
	where  map[pairKey][]int32 // pair -> indices of words that contained it when it was counted
	heap   countHeap
	stamp  []int // stamp[w] == merge number once word w is rewritten in that merge
	merges int
	delta  map[pairKey]int64
}

func newTrainer(docs iter.Seq[string]) *trainer {
	pieceCount := map[string]int64{}
	for doc := range docs {
		for p := range Pieces(doc) {
			if _, ok := pieceCount[p]; !ok {
				p = strings.Clone(p) // do not keep the document alive
			}
			pieceCount[p]++
		}
	}
	pieces := make([]string, 0, len(pieceCount))
	for p := range pieceCount {
		pieces = append(pieces, p)
	}
	sort.Strings(pieces) // word order fixes nothing in the result, but keeps runs reproducible to debug
	tr := &trainer{
		ids:    make(map[string]int32),
		counts: make(map[pairKey]int64),
		where:  make(map[pairKey][]int32),
		delta:  make(map[pairKey]int64),
		stamp:  make([]int, len(pieces)),
	}
	for b := range 256 {
		tr.tokens = append(tr.tokens, string([]byte{byte(b)}))
		tr.ids[tr.tokens[b]] = int32(b)
	}
	tr.words = make([]trainWord, len(pieces))
	for w, p := range pieces {
		syms := make([]int32, len(p))
		for i := range len(p) {
			syms[i] = int32(p[i])
		}
		c := pieceCount[p]
		tr.words[w] = trainWord{syms, c}
		for i := 0; i+1 < len(syms); i++ {
			k := pack(syms[i], syms[i+1])
			tr.counts[k] += c
			tr.addWhere(k, int32(w))
		}
	}
	for k, c := range tr.counts {
		tr.heap = append(tr.heap, countEntry{c, k})
	}
	heap.Init(&tr.heap)
	return tr
}

func (tr *trainer) addWhere(k pairKey, w int32) {
	if l := tr.where[k]; len(l) == 0 || l[len(l)-1] != w {
		tr.where[k] = append(l, w)
	}
}

// step performs the next merge and reports whether there was one (a pair occurring at least twice).
func (tr *trainer) step() bool {
	for tr.heap.Len() > 0 {
		e := heap.Pop(&tr.heap).(countEntry)
		if tr.counts[e.pair] != e.count {
			continue // stale: a newer entry carries the current count
		}
		if e.count < 2 {
			return false
		}
		tr.merge(e.pair)
		return true
	}
	return false
}

// merge rewrites every word containing pair as one symbol and updates the pair counts.
func (tr *trainer) merge(k pairKey) {
	a, b := int32(k>>32), int32(uint32(k))
	merged := tr.tokens[a] + tr.tokens[b]
	id, ok := tr.ids[merged]
	if !ok {
		id = int32(len(tr.tokens))
		tr.tokens = append(tr.tokens, merged)
		tr.ids[merged] = id
	}
	tr.merges++
	clear(tr.delta)
	for _, w := range tr.where[k] {
		if tr.stamp[w] == tr.merges {
			continue
		}
		tr.stamp[w] = tr.merges
		word := &tr.words[w]
		old := word.syms
		var syms []int32
		for i := 0; i < len(old); i++ {
			if i+1 < len(old) && old[i] == a && old[i+1] == b {
				syms = append(syms, id)
				i++
			} else {
				syms = append(syms, old[i])
			}
		}
		if len(syms) == len(old) {
			continue // the pair left this word in an earlier merge
		}
		for i := 0; i+1 < len(old); i++ {
			tr.delta[pack(old[i], old[i+1])] -= word.count
		}
		for i := 0; i+1 < len(syms); i++ {
			pk := pack(syms[i], syms[i+1])
			tr.delta[pk] += word.count
			if syms[i] == id || syms[i+1] == id {
				tr.addWhere(pk, w)
			}
		}
		word.syms = syms
	}
	delete(tr.where, k)
	for pk, d := range tr.delta {
		if d == 0 {
			continue
		}
		c := tr.counts[pk] + d
		if c <= 0 {
			delete(tr.counts, pk)
			continue
		}
		tr.counts[pk] = c
		heap.Push(&tr.heap, countEntry{c, pk})
	}
}

// countEntry is a pair with its count when pushed.
type countEntry struct {
	count int64
	pair  pairKey
}

// countHeap pops the highest count first, the smallest pair key on ties.
type countHeap []countEntry

func (h countHeap) Len() int { return len(h) }
func (h countHeap) Less(i, j int) bool {
	return h[i].count > h[j].count || (h[i].count == h[j].count && h[i].pair < h[j].pair)
}
func (h countHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *countHeap) Push(x any)   { *h = append(*h, x.(countEntry)) }
func (h *countHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
