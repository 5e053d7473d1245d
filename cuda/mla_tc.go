package cuda

import (
	"fmt"
	"math"
	"slices"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Launch parameters of mla_tc.cu (mma.sync): a block of 128 threads (4 warps of 16 query rows) per (query
// tile of up to 64 rows of one sequence, head); keys in blocks of 64 rows anchored at the sequence start,
// staged two blocks at a time in rows padded by 8 halves. mla_wg.cu (wgmma, sm_90a) runs two such tiles a
// block, one a warpgroup of 128 threads, sharing each staged block.
const (
	mlaTCTile    = 64
	mlaTCThreads = 128
	mlaTCPad     = 8
	mlaWGTiles   = 2
)

// mlaTCTempMax bounds the bfloat16 key and value copies (k_mla_prep) of one launch group, in bytes: heads
// are processed in groups small enough for it (every head is computed alone, so grouping changes no bit;
// a variable so that a test can force small groups).
var mlaTCTempMax = 1 << 30

// mlaTCKernel is one instantiation of the tensor-core MLA kernels: qk <= qkp, vdim <= vp, zero-padded.
type mlaTCKernel struct {
	name    string
	qkp, vp int
	wg      bool // mla_wg.cu's kernel (wgmma) rather than mla_tc.cu's (mma.sync)
}

// shmem is the kernel's dynamic shared memory in bytes: two stages of a key block and a value block, in
// rows padded by mlaTCPad halves (mma.sync); or the block's query rows and those stages in the 128-byte
// swizzle after up to 1,024 bytes that align them to a swizzle atom (wgmma).
func (k mlaTCKernel) shmem() int {
	if k.wg {
		return mlaTCTile*(mlaWGTiles*k.qkp+2*k.qkp+2*k.vp)*2 + 1024
	}
	return 2 * mlaTCTile * (k.qkp + mlaTCPad + k.vp + mlaTCPad) * 2
}

// tileRows is the query rows of a block's tile: 64, or two 64-row tiles on wgmma.
func (k mlaTCKernel) tileRows() int {
	if k.wg {
		return mlaWGTiles * mlaTCTile
	}
	return mlaTCTile
}

// threads is the kernel's block size: 128 threads a 64-row tile.
func (k mlaTCKernel) threads() int { return k.tileRows() / mlaTCTile * mlaTCThreads }

// mlaTCKernels in the order tried: the smallest that fits is used (a choice by head shape, never by n),
// by the mma.sync name and the wgmma one.
var mlaTCKernels = []struct {
	tc, wg  string
	qkp, vp int
}{
	{"k_mla_tc_64_64", "k_mla_wg_64_64", 64, 64},
	{"k_mla_tc_128_128", "k_mla_wg_128_128", 128, 128},
	{"k_mla_tc_192_128", "k_mla_wg_192_128", 192, 128},
}

// mlaTCFor returns the tensor-core kernel for the head sizes, if one covers them: on wgmma when wg.
func mlaTCFor(qk, vdim int, wg bool) (mlaTCKernel, bool) {
	for _, k := range mlaTCKernels {
		if qk <= k.qkp && vdim <= k.vp {
			if wg {
				return mlaTCKernel{k.wg, k.qkp, k.vp, true}, true
			}
			return mlaTCKernel{k.tc, k.qkp, k.vp, false}, true
		}
	}
	return mlaTCKernel{}, false
}

// mlaTCTasks lists the query tiles of l as (sequence start, t0, t1), tiles of size rows from each sequence
// start, the longest (most key blocks) first so that the tail of the grid is short ones. The order
// decides only which block runs a tile, never a bit of it.
func mlaTCTasks(l ops.Layout, size int) []int32 {
	type tile struct{ start, t0, t1 int }
	var tiles []tile
	for s := range l.Sequences() {
		for t := l.Starts[s]; t < l.Starts[s+1]; t += size {
			tiles = append(tiles, tile{l.Starts[s], t, min(t+size, l.Starts[s+1])})
		}
	}
	slices.SortStableFunc(tiles, func(a, b tile) int { return (b.t0 - b.start) - (a.t0 - a.start) })
	tasks := make([]int32, 0, 3*len(tiles))
	for _, t := range tiles {
		tasks = append(tasks, int32(t.start), int32(t.t0), int32(t.t1))
	}
	return tasks
}

// mlaTC launches the tensor-core kernel k (BF16 precision): per group of heads, k_mla_prep (bfloat16 keys
// and values) then k. ts is q, kv, ks, and optionally a second kv, ks whose rows follow the first's (a
// slice's own keys after the carried prefix's, which k_mla_prep reads where they are instead of a joined
// copy). With kvb not nil the kv are latents and the keys and values come from kv_b's batched calls
// instead of k_mla_prep (mla_latent.go), every group a batch of the same count of heads: the last group's
// calls start early enough to keep it (they write again keys the group before wrote, the same bits),
// and its kernel launch takes only its own heads.
func (b *Backend) mlaTC(k mlaTCKernel, ts []*Tensor, heads, nope, shared, vdim int, l ops.Layout, qOff int, part *keyPart, kvb *Tensor) (ops.Tensor, error) {
	const op = "MLA"
	// rows: the key rows (qOff more than the queries' when a slice continues a sequence, MLA's mla), n0
	// of them from the first source
	rows, n0, qk := ts[1].rows, ts[1].rows, nope+shared
	if len(ts) == 5 {
		rows += ts[3].rows
	}
	shmem := k.shmem()
	if shmem > b.info.MaxSharedOptin {
		return nil, shapeErr(op, "head sizes qk %d, vdim %d need %d bytes of shared memory on the tensor cores, the device allows %d", qk, vdim, shmem, b.info.MaxSharedOptin)
	}
	tasks, low := part.tiles(mlaTCTasks(l, k.tileRows()), qOff)
	perHead := rows * (k.qkp + k.vp) * 2
	group := max(1, min(heads, mlaTCTempMax/max(perHead, 1)))
	latent := kvb != nil
	var key latentKey
	if latent { // groups of one size: as many as before, as even as they go
		groups := (heads + group - 1) / group
		group = (heads + groups - 1) / groups
		key = latentKey{heads, nope, shared, vdim, ts[1].cols}
	}
	scale := float32(math.Log2E / math.Sqrt(float64(qk)))
	var m mlaLaunch
	err := b.run(op, func(c *opCtx) error {
		var run bool
		var err error
		// tc: k_mla_prep and the kernel convert q, kv and ks to bfloat16 by round to nearest even, the
		// rounding a MatMul deferred to them (deferred.go), and the kernel skips the query rows before
		// qOff (its qlo), which belong to the slice before
		if m, run, err = c.mlaBegin(ts, tasks, heads*vdim, qOff, low, part, true); !run {
			return err
		}
		kb, err := c.temp(group * rows * k.qkp * 2)
		if err != nil {
			return err
		}
		vb, err := c.temp(group * rows * k.vp * 2)
		if err != nil {
			return err
		}
		// above 48 KiB a kernel's dynamic shared memory must be opted into (backend.go does it at start
		// for the other kernels)
		d := b.drv
		if err := d.Check(fmt.Sprintf("cuFuncSetAttribute(%s, max dynamic shared memory)", k.name),
			bind.Call(d.CuFuncSetAttribute, b.fn(k.name), bind.FuncAttrMaxDynamicSharedBytes, uintptr(shmem))); err != nil {
			return err
		}
		var lx *latentExpansion
		if latent {
			if lx, err = c.newLatentExpansion(k, key, group, ts, n0); err != nil {
				return err
			}
		}
		for h0 := 0; h0 < heads; h0 += group {
			hg := min(group, heads-h0)
			kv2, ks2 := m.in[1], m.in[2]
			if len(ts) == 5 {
				kv2, ks2 = m.in[3], m.in[4]
			}
			kbh, vbh := kb, vb // head h0's keys and values
			if latent {
				g0 := min(h0, heads-group)
				if err := lx.expand(c, g0, kb, vb, kvb.ptr, m.in[2], ks2, rows, n0); err != nil {
					return err
				}
				kbh += uint64(2 * (h0 - g0) * rows * k.qkp)
				vbh += uint64(2 * (h0 - g0) * rows * k.vp)
			} else if err := c.launch("k_mla_prep", d1((hg*rows+7)/8), d1(256), 0, kb, vb, m.in[1], m.in[2], int64(rows), int32(heads),
				int32(h0), int32(hg), int32(nope), int32(shared), int32(vdim), int32(k.qkp), int32(k.vp), kv2, ks2, int64(n0)); err != nil {
				return err
			}
			kbp, vbp := part.rebase(kbh, 2*k.qkp), part.rebase(vbh, 2*k.vp)
			args := append([]any{m.o, m.q, kbp, vbp, m.tasks, int32(heads), int32(h0), int64(rows), int32(qk), int32(vdim), scale, b.bf, int64(qOff)},
				part.stateArgs(low)...)
			if err := c.launch(k.name, d2(len(tasks)/3, hg), d1(k.threads()), shmem, args...); err != nil {
				return err
			}
		}
		return m.finish()
	})
	if err != nil {
		return nil, err
	}
	return m.result(), nil
}
