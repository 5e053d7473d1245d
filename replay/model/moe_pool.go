package model

import (
	"fmt"
	"slices"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// Pooled expert calls. An expert-major layer fetches a chunk of experts once and runs every slice's rows
// through it. One ExpertsAccumulate a slice gives each expert the few rows one slice routed to it: in run
// 38 (one 262,144-token sequence in 24 GB, slices of 5,120 tokens, chunks of 128 experts) that was about
// 90 rows an expert a call, 364 calls and 3.5 s a MoE layer for 0.35 s of FLOPs. So the slices are pooled:
// consecutive slices whose rows, uploaded as one tensor with the backend's scratch for the call, fit the
// device memory a slice's activations leave free in that phase (Pass.PoolBytes), share each call (run
// 40: 20 calls a MoE layer instead of 256, 5.3 s instead of 9.5). The expert inputs wait in one host
// buffer for the whole wave, so a pool's rows upload as one tensor (or, on the device, slice by slice,
// joined for the call: ops.RowJoiner), and each pool keeps one float32 accumulator on the device; the
// layer's last phase takes a slice's rows of it (Gather, an exact copy).
//
// Bits: ExpertsAccumulate gives a row the same result whatever the other rows of the call (batch
// invariance, the contract every backend keeps for waves), so a pool's call equals its slices' calls.

// stash is an expert-major layer's rows for the whole wave between its phases: slice j's are rows
// bounds[j] .. bounds[j+1]-1. In host memory BF16 precision keeps bfloat16 bits (2 bytes a value), FP32
// float32; on the device the slices' tensors are kept as they came.
type stash struct {
	cols int
	bf   []uint16
	f    []float32
	// on the device (Pass.StashOnDevice): the slices' tensors as put, each from row at[i]
	dev []ops.Tensor
	at  []int
	j   ops.RowJoiner
}

// newStash makes the stash of rows x cols values, in a buffer an earlier expert-major layer gave back
// when one has the size (a fresh allocation faults its pages in during the first copy into it: run 38).
func (f *Pass) newStash(rows, cols int) *stash {
	s := &stash{cols: cols}
	if j, ok := f.Model.Ops.(ops.RowJoiner); ok && f.StashOnDevice {
		s.j = j
		return s
	}
	if f.Model.Ops.Precision() == ops.FP32 {
		s.f = make([]float32, rows*cols)
	} else {
		s.bf = f.host.get(rows * cols)
	}
	return s
}

// keeps says whether put keeps the tensor it is given (on the device), which the caller then must not
// free.
func (s *stash) keeps() bool { return s.j != nil }

// release hands s's buffer to the next expert-major layer, or frees its tensors on the device.
func (s *stash) release(f *Pass) {
	if s == nil {
		return
	}
	for _, t := range s.dev {
		f.Model.Ops.Free(t)
	}
	s.dev, s.at = nil, nil
	if s.bf != nil {
		f.host.put(s.bf)
		s.bf = nil
	}
}

// put copies t into rows lo .. lo+t.Rows()-1.
func (s *stash) put(b ops.Backend, lo int, t ops.Tensor) error {
	if t.Cols() != s.cols {
		return fmt.Errorf("stash of %d columns given a tensor of %d", s.cols, t.Cols())
	}
	if s.j != nil { // kept as it is, in row order
		if n := len(s.at); n > 0 && lo != s.at[n-1]+s.dev[n-1].Rows() {
			return fmt.Errorf("stash: rows from %d after rows %d..%d", lo, s.at[n-1], s.at[n-1]+s.dev[n-1].Rows()-1)
		}
		s.dev, s.at = append(s.dev, t), append(s.at, lo)
		return nil
	}
	a, z := lo*s.cols, (lo+t.Rows())*s.cols
	if s.f != nil {
		v, err := b.ToHost(t)
		if err == nil {
			copy(s.f[a:z], v)
		}
		return err
	}
	if m, ok := b.(ops.BF16Transfer); ok {
		return toHostBF16(m, t, s.bf[a:z])
	}
	v, err := b.ToHost(t)
	if err != nil {
		return err
	}
	bf, ok := toBF16Bits(v)
	if !ok {
		return fmt.Errorf("rows %d..%d: values that are not bfloat16 in BF16 precision", lo, lo+t.Rows()-1)
	}
	copy(s.bf[a:z], bf)
	return nil
}

// upload makes a backend tensor of rows lo .. hi-1 (FromHost rounds; the values are rounded already, so
// the bits are those put).
func (s *stash) upload(b ops.Backend, lo, hi int) (ops.Tensor, error) {
	if s.j != nil { // the tensors of exactly rows lo .. hi-1, joined (a copy the caller frees)
		var parts []ops.Tensor
		next := lo
		for i, t := range s.dev {
			if s.at[i] >= lo && s.at[i] < hi {
				if s.at[i] != next {
					return nil, fmt.Errorf("stash: rows %d..%d do not start a slice's", lo, hi-1)
				}
				parts, next = append(parts, t), next+t.Rows()
			}
		}
		if next != hi {
			return nil, fmt.Errorf("stash: rows %d..%d do not end a slice's", lo, hi-1)
		}
		return s.j.JoinRows(parts)
	}
	a, z := lo*s.cols, hi*s.cols
	h := hostRows{rows: hi - lo, cols: s.cols}
	if s.f != nil {
		h.f = s.f[a:z]
	} else {
		h.bf = s.bf[a:z]
	}
	return h.upload(b)
}

// take is upload for rows the layer reads no more after this: on the device the slices' tensors are
// handed over (a slice alone) or joined and freed, so that they are not copied once per use and not held
// beside their copy; in host memory it is upload.
func (s *stash) take(b ops.Backend, lo, hi int) (ops.Tensor, error) {
	if s.j == nil {
		return s.upload(b, lo, hi)
	}
	first, last := -1, -1
	for i := range s.dev {
		if s.at[i] >= lo && s.at[i] < hi {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first == last && first >= 0 && s.at[first] == lo && lo+s.dev[first].Rows() == hi {
		t := s.dev[first]
		s.dev, s.at = slices.Delete(s.dev, first, first+1), slices.Delete(s.at, first, first+1)
		return t, nil
	}
	t, err := s.upload(b, lo, hi) // checks that the rows are whole slices'
	if err != nil {
		return nil, err
	}
	for _, p := range s.dev[first : last+1] {
		b.Free(p)
	}
	s.dev, s.at = slices.Delete(s.dev, first, last+1), slices.Delete(s.at, first, last+1)
	return t, nil
}

// pool is consecutive slices lo .. hi-1 of an expert-major layer sharing its expert calls.
type pool struct {
	lo, hi  int
	routing ops.Routing // the slices' routings, one after the other (a window of the wave's)
	pairs   []int       // pairs[e]: the pool's (row, expert) pairs with expert e
	acc     ops.Tensor  // [rows, latent] float32 on the device
}

// expertCallBytes is the device memory one ExpertsAccumulate over rows rows of z with pairs (row,
// expert) pairs takes beyond its accumulator: z (as an activation) and the backend's scratch
// (ops.ExpertScratch; without it, float32 gate, up and output values of every pair, as the CPU backend
// holds them: the plan's assumption too).
func (m *Model) expertCallBytes(rows, pairs int) int64 {
	return int64(rows)*int64(m.Dims.Latent)*m.ActivationBytes() + m.ExpertScratchBytes(rows, pairs)
}

// ExpertScratchBytes is what ExpertsAccumulate takes beyond acc and z on m's backend for a call over rows
// rows of z with pairs (row, expert) pairs (ops.ExpertScratch, else 4 x pairs x (latent + 2 ffn)).
func (m *Model) ExpertScratchBytes(rows, pairs int) int64 {
	d := m.Dims
	if s, ok := m.Ops.(ops.ExpertScratch); ok {
		return s.ExpertScratchBytes(rows, pairs, d.Latent, d.ExpertFFN)
	}
	return 4 * int64(pairs) * int64(d.Latent+2*d.ExpertFFN)
}

// waveRouting is an expert-major layer's routing of the whole wave, filled slice by slice in its first
// phase: the slices' ids and weights one after the other, so that a pool's routing is a window of it and
// not a copy, and each slice's pairs per expert, so that the pools are planned from counts. At 262,144
// tokens the wave routes 4.2 million pairs; copied and counted when the expert phase began, with the
// device waiting, they took 250 ms of host time a layer (BenchmarkPoolsK3; docs/records/run51).
type waveRouting struct {
	all     ops.Routing // Indexed: a pool of the whole wave plans its calls from the index
	experts int         // the layer's routed experts
	hist    [][]int     // hist[j][e]: slice j's (row, expert) pairs with expert e
	puts    int         // slices put so far
}

// newWaveRouting makes the routing of a wave of rows rows choosing k experts of n each, in slices slices.
func newWaveRouting(rows, k, n, slices int) *waveRouting {
	all := ops.Routing{K: k, IDs: make([]int32, rows*k), Weights: make([]float32, rows*k)}
	return &waveRouting{all: all.Indexed(), experts: n, hist: make([][]int, slices)}
}

// put takes slice j's routing r, its rows from row lo of the wave.
func (w *waveRouting) put(j, lo int, r ops.Routing) error {
	a := lo * w.all.K
	if r.K != w.all.K || len(r.IDs) != len(r.Weights) || a+len(r.IDs) > len(w.all.IDs) {
		return fmt.Errorf("routing of slice %d (%d ids, top-%d) does not fit the wave's from row %d (%d ids, top-%d)",
			j, len(r.IDs), r.K, lo, len(w.all.IDs), w.all.K)
	}
	copy(w.all.IDs[a:], r.IDs)
	copy(w.all.Weights[a:], r.Weights)
	h := make([]int, w.experts)
	for _, id := range r.IDs {
		if id < 0 || int(id) >= w.experts {
			return fmt.Errorf("routing of slice %d chose expert %d of %d", j, id, w.experts)
		}
		h[id]++
	}
	w.hist[j] = h
	if w.puts++; w.puts == len(w.hist) {
		// the last slice: the index of the whole wave's rows by expert is built while the host queues the
		// rest of the slice and the expert phase begins (its first call waits for it)
		go w.all.BuildIndex()
	}
	return nil
}

// chosen is the experts any slice chose, ascending.
func (w *waveRouting) chosen() []int {
	var out []int
	for e := range w.experts {
		for _, h := range w.hist {
			if h[e] > 0 {
				out = append(out, e)
				break
			}
		}
	}
	return out
}

// rows is the routing of wave rows lo .. hi-1, indexed (ops.Routing.Indexed): the wave's own for all of
// it, else a window of it with its own index.
func (w *waveRouting) rows(lo, hi int) ops.Routing {
	k := w.all.K
	if lo == 0 && hi*k == len(w.all.IDs) {
		return w.all
	}
	return ops.Routing{K: k, IDs: w.all.IDs[lo*k : hi*k], Weights: w.all.Weights[lo*k : hi*k]}.Indexed()
}

// pools cuts an expert-major layer's slices (bounds, their routing wr) into pools for the expert chunks
// of ids (ascending, chunk at a time): consecutive slices, as many as keep every chunk's call within
// f.PoolBytes and the backend's element limit, a chunk's call cut as f.callMost says. A slice alone
// always makes a pool (the plan holds its calls).
func (f *Pass) pools(bounds []int, wr *waveRouting, ids []int, chunk int) []pool {
	m := f.Model
	nChunks := (len(ids) + chunk - 1) / max(chunk, 1)
	// pairs[j][c]: slice j's (row, expert) pairs with the expert in chunk c
	pairs := make([][]int, len(wr.hist))
	for j, h := range wr.hist {
		pairs[j] = make([]int, nChunks)
		for i, id := range ids {
			pairs[j][i/chunk] += h[id]
		}
	}
	limit := int64(-1)
	if l, ok := m.Ops.(ops.ElementLimit); ok {
		limit = l.MaxElements() / int64(max(m.Dims.Latent, m.Dims.ExpertFFN))
	}
	// fits says whether a pool of rows rows and sums[c] pairs in each chunk c plans within the budget: a
	// chunk's pairs past what a call over the rows takes go in calls of their own (moe_calls.go)
	fits := func(rows int, sums []int) bool {
		if limit >= 0 && int64(rows) > limit {
			return false
		}
		for _, n := range sums {
			if most := f.callMost(rows); most >= 0 {
				n = min(n, most)
			}
			if limit >= 0 && int64(n) > limit || m.expertCallBytes(rows, n) > f.PoolBytes {
				return false
			}
		}
		return true
	}
	var out []pool
	for lo := 0; lo < len(wr.hist); {
		hi := lo + 1
		sums := append([]int(nil), pairs[lo]...)
		for hi < len(wr.hist) {
			next := make([]int, nChunks)
			for c := range next {
				next[c] = sums[c] + pairs[hi][c]
			}
			if !fits(bounds[hi+1]-bounds[lo], next) {
				break
			}
			sums, hi = next, hi+1
		}
		// indexed: every chunk's call on the pool plans from it (ops.Routing.Indexed)
		p := pool{lo: lo, hi: hi, routing: wr.rows(bounds[lo], bounds[hi]), pairs: wr.hist[lo]}
		if hi > lo+1 {
			p.pairs = make([]int, wr.experts)
			for _, h := range wr.hist[lo:hi] {
				for e, n := range h {
					p.pairs[e] += n
				}
			}
		}
		out = append(out, p)
		lo = hi
	}
	return out
}

// sliceAcc returns slice j's rows of its pool's accumulator (the accumulator itself when the pool is the
// slice alone; else a copy the caller frees).
func (p *pool) sliceAcc(b ops.Backend, bounds []int, j int) (ops.Tensor, error) {
	if p.hi == p.lo+1 {
		return p.acc, nil
	}
	off := bounds[j] - bounds[p.lo]
	ids := make([]int32, bounds[j+1]-bounds[j])
	for i := range ids {
		ids[i] = int32(off + i)
	}
	return b.Gather(p.acc, ids)
}
