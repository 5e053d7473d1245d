package cuda

import (
	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Launch parameters of tokenstats.cu: one block of 256 threads per row of logits. Logits exist a chunk of
// rows at a time: at most statsChunkBytes of them (1 GiB: 1,536 rows of K3's 163,840-word vocabulary, a
// multiple of statsRowAlign), at least one row. A chunk that large keeps the lm_head GEMM efficient (at
// 102 rows, the 64 MiB chunks before, each call reread the 2.3 GB weight for 0.24 TFLOP) and gives
// k_token_stats more blocks than the device has SMs; it stays far below the logits of a whole wave
// (65,536 tokens: 43 GB) and within one cuBLASLt call (ltCallRows: 13,104 rows at that shape).
const (
	statsThreads    = 256
	statsChunkBytes = 1 << 30
	statsRowAlign   = 256
)

// statsChunk returns the rows of a chunk for rows rows of vocab logits and at most bytes bytes a chunk:
// the rows spread evenly over the fewest chunks (no small last chunk, whose GEMM would read the whole
// weight for a few rows), rounded up to a multiple of statsRowAlign when a chunk holds that many (whole
// GEMM tiles), never more than rows. A row's results do not depend on it (TestTokenStatsChunkInvariance).
func statsChunk(rows, vocab, bytes int) int {
	most := max(1, bytes/(4*max(1, vocab)))
	if most >= statsRowAlign {
		most &^= statsRowAlign - 1
	}
	chunks := (rows + most - 1) / most
	n := (rows + chunks - 1) / chunks
	if most >= statsRowAlign {
		n = min(most, (n+statsRowAlign-1)&^(statsRowAlign-1))
	}
	return max(1, min(rows, n))
}

// TokenStats reduces logits = rounded(h w^T) row by row, a chunk of rows at a time (the lm_head matmul,
// then k_token_stats, which rounds the logits as it reads them when the matmul left them unrounded).
// Per row, with l the rounded logits:
//
//	m = max l;  S = sum exp(l - m), T = sum exp(l - m) * (l - m)   // double, fixed per-thread order and tree
//	lse = m + log S;  Logprob = float32(l[t] - lse);  Entropy = float32(log S - T/S)
//	Rank = 1 + #{v : l[v] > l[t]};  TopIDs = the k largest l, by l descending, ties by id ascending
//
// (TopLogp: l - lse of each). The sums differ from the CPU backend's single ascending double sum at double
// rounding; ranks and top ids compare the same float32 logits, which equal the CPU backend's bit for bit.
// A row's results depend on its h row, w, its target and k only, not on the chunk it falls in.
func (b *Backend) TokenStats(h, w ops.Tensor, targets []int32, k int) ([]ops.TokenStats, error) {
	return b.tokenStats(h, w, targets, k, statsChunkBytes)
}

// tokenStats is TokenStats with chunks of at most chunkBytes bytes of logits (tests use smaller ones).
func (b *Backend) tokenStats(h, w ops.Tensor, targets []int32, k int, chunkBytes int) ([]ops.TokenStats, error) {
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
	chunk := statsChunk(rows, vocab, chunkBytes)
	err = b.run(op, func(c *opCtx) error {
		hp, err := c.xaddr(ht) // gemm reads a narrow-only h's copy (narrow.go)
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
		// on cuBLASLt the chunks read h's kept bfloat16 copy (narrow.go), which the final norm writes with
		// its output (norm.go keepsNarrow), instead of converting each chunk: the same values
		c.xsrc = ht
		for r0 := 0; r0 < rows; r0 += chunk {
			n := min(chunk, rows-r0)
			rd, err := c.statsLogits(logits, hp+uint64(4*r0*ht.cols), n, ht.cols, weightOf(wt))
			if err != nil {
				return err
			}
			o := func(i, per int) uint64 { return bufs[i] + uint64(4*r0*per) }
			if err := c.statsKernel([5]uint64{o(0, 1), o(1, 1), o(2, 1), o(3, k), o(4, k)}, logits, tg+uint64(4*r0), n, vocab, k, rd); err != nil {
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

// statsLogits writes n rows of logits = x w^T (x: n x cols float32) for k_token_stats and returns the
// kernel's bf flag: 1 when the logits are the lm_head's unrounded float32 sums, which the kernel rounds
// as it reads them. That is the case on cuBLASLt (gemm's choice, repeated here: BF16 precision,
// a bfloat16 weight, tensor cores allowed, the shape planned), where gemm's rounding would be a separate
// pass over the chunk (k_round); elsewhere gemm rounds in the matmul kernel and the flag is 0. The
// logits' bits after rounding are the same either way.
func (c *opCtx) statsLogits(logits, x uint64, n, cols int, w weightRef) (int32, error) {
	b := c.b
	if cols == 0 {
		return 0, b.drv.Check("cuMemsetD32Async", bind.Call(b.drv.CuMemsetD32Async, uintptr(logits), 0, uintptr(n*w.rows), b.dv.Stream))
	}
	if b.bf == 1 && w.tc != "" && w.lt && !b.opts.NoTensorCores && b.lt != nil {
		s, err := b.lt.shape(w.rows, w.k)
		if err != nil {
			return 0, err
		}
		if s.ok {
			return 1, c.gemmLt(s, logits, x, n, w, false)
		}
	}
	return 0, c.gemm(logits, x, n, w, true)
}

// statsKernel launches k_token_stats over n rows of logits; outs are lp, rank, ent, topIDs and topLp at
// the chunk's first row.
func (c *opCtx) statsKernel(outs [5]uint64, logits, targets uint64, n, vocab, k int, bf int32) error {
	return c.launch("k_token_stats", d1(n), d1(statsThreads), 0,
		outs[0], outs[1], outs[2], outs[3], outs[4], logits, targets, int32(vocab), int32(k), bf)
}
