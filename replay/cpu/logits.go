package cpu

import (
	"math"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// tokenChunk is the number of rows whose logits exist at once: 32 x 163,840 float32 is 21 MB.
const tokenChunk = 32

// TokenStats computes the next-token statistics of every row of h against the lm_head w (vocab x cols),
// tokenChunk rows of logits at a time. Per row, with l = rounded(h[r] w^T) as MatMul computes it:
//
//	m := max_v l[v]
//	x_v := float64(l[v]) - float64(m);  e_v := exp(x_v)
//	S := sum_v e_v;  T := sum_v e_v * x_v                  // float64, ascending v
//	lse := float64(m) + log(S)
//	Logprob = float32(float64(l[t]) - lse)                 // t = targets[r]; 0 when t < 0
//	Rank    = 1 + #{v : l[v] > l[t]}                        // 0 when t < 0
//	Entropy = float32(log(S) - T/S)                         // = -sum p log p
//	TopIDs  = the k ids of largest l, ties to the lower id; TopLogp their Logprob
//
// The sums run in float64, wider than the contract's float32, because a float32 sum of 163,840 terms
// loses about 1e-5 nats; the max shift and the order keep the result independent of the wave.
func (b *Backend) TokenStats(h, w ops.Tensor, targets []int32, k int) ([]ops.TokenStats, error) {
	began := b.opStart()
	const op = "TokenStats"
	ts, err := tensors(op, []string{"h", "w"}, h, w)
	if err != nil {
		return nil, err
	}
	ht, wt := ts[0], ts[1]
	if err := ops.CheckTokenStats(h, w, targets, k); err != nil {
		return nil, err
	}
	rows, vocab := ht.rows, wt.rows
	stats := make([]ops.TokenStats, rows)
	logits := make([]float32, min(tokenChunk, rows)*vocab)
	for r0 := 0; r0 < rows; r0 += tokenChunk {
		n := min(tokenChunk, rows-r0)
		b.gemm(logits, ht.data[r0*ht.cols:], n, wt.data, vocab, ht.cols, b.bf)
		b.parallel(n, func(i int) {
			stats[r0+i] = rowStats(logits[i*vocab:(i+1)*vocab], targets[r0+i], k)
		})
	}
	if err := b.interrupted("TokenStats", began); err != nil {
		return nil, err
	}
	return stats, nil
}

// rowStats reduces one row of logits as TokenStats documents.
func rowStats(l []float32, target int32, k int) ops.TokenStats {
	m := l[0]
	for _, x := range l[1:] {
		m = max(m, x)
	}
	var s, t float64
	for _, v := range l {
		x := float64(v) - float64(m)
		e := math.Exp(x)
		s += e
		t += float64(e * x) // no fused multiply-add on any GOARCH
	}
	lse := float64(m) + math.Log(s)
	st := ops.TokenStats{Entropy: float32(math.Log(s) - t/s)}
	if target >= 0 {
		lt := l[target]
		st.Logprob = float32(float64(lt) - lse)
		st.Rank = 1
		for _, v := range l {
			if v > lt {
				st.Rank++
			}
		}
	}
	st.TopIDs = make([]int32, k)
	st.TopLogp = make([]float32, k)
	if k > 0 {
		topK(l, st.TopIDs)
	}
	for i, id := range st.TopIDs {
		st.TopLogp[i] = float32(float64(l[id]) - lse)
	}
	return st
}
