package cuda

import (
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Launch parameters of tokenstats.cu (version 1): one block of 256 threads per row of logits. Logits
// exist a chunk of rows at a time: at most statsChunkBytes of them (64 MiB: 102 rows of K3's 163,840-word
// vocabulary), at least one row.
const (
	statsThreads    = 256
	statsChunkBytes = 64 << 20
)

// TokenStats reduces logits = rounded(h w^T) row by row, a chunk of rows at a time (the matmul kernel,
// then k_token_stats). Per row, with l the rounded logits:
//
//	m = max l;  S = sum exp(l - m), T = sum exp(l - m) * (l - m)   // double, fixed per-thread order and tree
//	lse = m + log S;  Logprob = float32(l[t] - lse);  Entropy = float32(log S - T/S)
//	Rank = 1 + #{v : l[v] > l[t]};  TopIDs = the k largest l, by l descending, ties by id ascending
//
// (TopLogp: l - lse of each). The sums differ from the CPU backend's single ascending double sum at double
// rounding; ranks and top ids compare the same float32 logits, which equal the CPU backend's bit for bit.
func (b *Backend) TokenStats(h, w ops.Tensor, targets []int32, k int) ([]ops.TokenStats, error) {
	const op = "TokenStats"
	ts, err := b.tensors(op, []string{"h", "w"}, h, w)
	if err != nil {
		return nil, err
	}
	ht, wt := ts[0], ts[1]
	if err := ops.CheckTokenStats(h, w, targets, k); err != nil {
		return nil, err
	}
	rows, vocab := ht.rows, wt.rows
	stats := make([]ops.TokenStats, rows)
	if rows == 0 {
		return stats, nil
	}
	lp, ent := make([]float32, rows), make([]float32, rows)
	rank := make([]int32, rows)
	topIDs, topLp := make([]int32, rows*k), make([]float32, rows*k)
	chunk := max(1, min(rows, statsChunkBytes/(4*vocab)))
	err = b.run(op, func(c *opCtx) error {
		hp, err := c.f32(ht)
		if err != nil {
			return err
		}
		logits, err := c.temp(4 * chunk * vocab)
		if err != nil {
			return err
		}
		tg, err := uploadTemp(c, targets)
		if err != nil {
			return err
		}
		var bufs [5]uint64 // lp, rank, ent, topIDs, topLp for all rows
		for i, size := range []int{rows, rows, rows, rows * k, rows * k} {
			if bufs[i], err = c.temp(4 * size); err != nil {
				return err
			}
		}
		for r0 := 0; r0 < rows; r0 += chunk {
			n := min(chunk, rows-r0)
			if ht.cols == 0 {
				err = b.drv.check("cuMemsetD32Async", ccall(b.drv.cuMemsetD32Async, uintptr(logits), 0, uintptr(n*vocab), b.strm))
			} else {
				err = c.gemm(logits, hp+uint64(4*r0*ht.cols), n, weightOf(wt), true)
			}
			if err != nil {
				return err
			}
			o := func(i, per int) uint64 { return bufs[i] + uint64(4*r0*per) }
			if err := c.launch("k_token_stats", d1(n), d1(statsThreads), 0,
				o(0, 1), o(1, 1), o(2, 1), o(3, k), o(4, k), logits, tg+uint64(4*r0), int32(vocab), int32(k)); err != nil {
				return err
			}
		}
		for _, d := range []struct {
			dst []float32
			src uint64
		}{{lp, bufs[0]}, {ent, bufs[2]}, {topLp, bufs[4]}} {
			if err := download(b, d.dst, d.src); err != nil {
				return err
			}
		}
		if err := download(b, rank, bufs[1]); err != nil {
			return err
		}
		return download(b, topIDs, bufs[3])
	})
	if err != nil {
		return nil, err
	}
	for r := range stats {
		stats[r] = ops.TokenStats{Logprob: lp[r], Rank: rank[r], Entropy: ent[r],
			TopIDs: topIDs[r*k : (r+1)*k : (r+1)*k], TopLogp: topLp[r*k : (r+1)*k : (r+1)*k]}
	}
	return stats, nil
}
