package cuda

import (
	"errors"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// A slice that continues a sequence attends to every earlier key of it. The carry keeps those keys
// compressed (the normalised latent and the shared key of every earlier row, kvLora + shared values a
// row); expanding all of them to every head's keys and values at once would take heads x (nope + vdim)
// values a row (about 64 kB in K3), 64 GB for a prefix of 1,048,576 rows. So past mlaPrefixRows rows the
// prefix is expanded and attended a part at a time (kernels/mla_tc.cu version 3, kernels/mla.cu keys in
// parts): each part's launch continues the softmax state that the previous one left for the tiles of the
// slice's first sequence, and the last part, the prefix rows of the key block the slice starts in
// followed by the slice's own keys, writes the output.

// defaultMLAPrefixRows is the most rows of a carried prefix expanded at once by default: 16,384 rows of
// K3's kv_b_proj output are 1.1 GB in float32 (what a 24 GB card can spare beside a slice), and a part's
// launch still keeps the device busy (the slice's queries times 16,384 keys).
const defaultMLAPrefixRows = 16384

// mlaKeyBlock is the key block both MLA kernels are anchored to (version 2's 64 rows, a multiple of
// version 1's 32): parts begin and end on it, so that every block is walked whole, in order, once.
const mlaKeyBlock = mlaTCTile

// prefixRows is the most rows of a carried MLA prefix expanded at once (Options.MLAPrefixRows).
func (b *Backend) prefixRows() int {
	if b.opts.MLAPrefixRows > 0 {
		return b.opts.MLAPrefixRows
	}
	return defaultMLAPrefixRows
}

// mlaCarried is MLA over a slice whose first sequence began off rows before it, with el the layout of
// the key rows (the prefix, then the slice's rows) and pl, pk the carried latents and shared keys of the
// prefix, wt kv_b_proj. A prefix of at most prefixRows rows is expanded whole (one launch); a longer one a
// part of at most prefixRows rows at a time, each part's launch taking the softmax state of the first
// sequence's tiles from the previous one. Either way every key block is walked as by one launch over all
// the keys, so the output has the unsliced op's bits. With kvb (kv_b, the same as wt) not nil, kvt holds
// the slice's latents instead of its kv rows and the kernels expand the keys (mla_latent.go), the prefix's
// by the same batched calls as the slice's.
func (b *Backend) mlaCarried(qt, kvt, kst, pl, pk, wt, kvb *Tensor, heads, nope, shared, vdim int, el ops.Layout, off int) (ops.Tensor, error) {
	const op = "MLA"
	chunk := b.prefixRows()
	tail := 0 // the first prefix row expanded with the slice's keys; the rows before it go in parts
	var part *keyPart
	if off > chunk {
		tail = off / mlaKeyBlock * mlaKeyBlock
		st, err := b.Zeros(1, b.mlaPartFloats(heads, nope, shared, vdim, el, off))
		if err != nil {
			return nil, err
		}
		defer b.Free(st)
		for lo := 0; lo < tail; lo += chunk {
			hi := min(lo+chunk, tail)
			kv, ks, err := b.expandPrefix(op, pl, pk, wt, lo, hi, kvb != nil)
			if err != nil {
				return nil, err
			}
			_, err = b.mla([]*Tensor{qt, kv, ks}, heads, nope, shared, vdim, el, off, &keyPart{base: lo, lo: lo, hi: hi, st: st.(*Tensor)}, kvb)
			b.Free(kv)
			b.Free(ks)
			if err != nil {
				return nil, err
			}
		}
		part = &keyPart{base: tail, lo: tail, hi: -1, st: st.(*Tensor)}
	}
	// the last part: the prefix from tail on, then the slice's own keys
	pre, pks, err := b.expandPrefix(op, pl, pk, wt, tail, off, kvb != nil)
	if err != nil {
		return nil, err
	}
	if _, tc := b.mlaTCKernel(nope+shared, vdim); tc {
		// the tensor-core kernels' k_mla_prep (or the latents' batched calls) read the prefix's rows and
		// the slice's where they are: no joined copy of the slice's keys (7.5 GB at 76,800 rows of K3)
		out, err := b.mla([]*Tensor{qt, pre, pks, kvt, kst}, heads, nope, shared, vdim, el, off, part, kvb)
		b.Free(pre)
		b.Free(pks)
		return out, err
	}
	keys, err := b.catRows(op, kvt.cols, rowRange{pre, 0, pre.rows}, rowRange{kvt, 0, kvt.rows})
	b.Free(pre)
	if err != nil {
		b.Free(pks)
		return nil, err
	}
	kss, err := b.catRows(op, kst.cols, rowRange{pks, 0, pks.rows}, rowRange{kst, 0, kst.rows})
	b.Free(pks)
	if err != nil {
		b.Free(keys)
		return nil, err
	}
	out, err := b.mla([]*Tensor{qt, keys, kss}, heads, nope, shared, vdim, el, off, part, nil)
	b.Free(keys)
	b.Free(kss)
	return out, err
}

// expandPrefix returns the kv rows (kv_b_proj of the latents) and shared keys of prefix rows lo..hi-1,
// as the slice that first held them made them (MatMul gives a row the same bits whatever its batch); with
// latent set, the latent rows themselves, for a kernel launch that expands them (mla_latent.go).
func (b *Backend) expandPrefix(op string, pl, pk, wt *Tensor, lo, hi int, latent bool) (kv, ks *Tensor, err error) {
	lat, err := b.catRows(op, pl.cols, rowRange{pl, lo, hi})
	if err != nil {
		return nil, nil, err
	}
	if latent {
		if ks, err = b.catRows(op, pk.cols, rowRange{pk, lo, hi}); err != nil {
			b.Free(lat)
			return nil, nil, err
		}
		return lat, ks, nil
	}
	x, err := b.MatMul(lat, wt)
	b.Free(lat)
	if err != nil {
		return nil, nil, err
	}
	if ks, err = b.catRows(op, pk.cols, rowRange{pk, lo, hi}); err != nil {
		b.Free(x)
		return nil, nil, err
	}
	kt, ok := x.(*Tensor)
	if !ok {
		b.Free(x)
		b.Free(ks)
		return nil, nil, errors.New("cuda: MatMul returned a foreign tensor")
	}
	return kt, ks, nil
}

var _ ops.PrefixSizer = (*Backend)(nil)

// MLAPrefixBytes is what MLASlice holds beyond its inputs and output for a slice that continues a
// sequence begun prefix rows before (ops.PrefixSizer): the expanded part of the prefix (its kv rows, its
// shared keys, the latents copied for the matmul) and the keys joined for the last launch, in float32
// (with keys from the latents, the latents and their bfloat16 copies instead of the kv rows); with more
// than prefixRows rows, also the softmax state of the slice's rows between the parts' launches.
func (b *Backend) MLAPrefixBytes(prefix, heads, nope, shared, vdim, kvLora int) (fixed, perRow int64) {
	if prefix <= 0 {
		return 0, 0
	}
	kvw := int64(heads) * int64(nope+vdim)
	rows := int64(min(prefix, b.prefixRows()+mlaKeyBlock))
	if b.MLAFromLatent(heads, nope, shared, vdim, kvLora) {
		// the part's latents and their bfloat16 copy instead of its keys, and the slice's latents' copy
		// (mla_latent.go)
		kvw = 0
		fixed, perRow = 2*rows*int64(kvLora), 2*int64(kvLora)
	}
	fixed += 4 * rows * (2*kvw + 2*int64(shared) + int64(kvLora))
	tc, isTC := b.mlaTCKernel(nope+shared, vdim)
	if isTC {
		fixed += int64(mlaTCTempMax) // the bfloat16 keys and values of a launch group (mla_tc.go)
	} else {
		perRow += 4 * (kvw + int64(shared)) // the slice's keys joined after the prefix rows of the last launch
	}
	if prefix > b.prefixRows() { // the softmax state of the tiles between the parts' launches
		if isTC {
			perRow += 4 * int64(heads) * mlaTCThreads * int64(tc.vp/8*4+4) / mlaTCTile
			// the wgmma kernel's state starts at the 128-row tile holding the slice's first row: up to
			// one 64-row tile more
			fixed += 4 * int64(heads) * mlaTCThreads * int64(tc.vp/8*4+4) * int64(tc.tileRows()/mlaTCTile-1)
		} else {
			perRow += 4 * int64(heads) * int64(vdim+2)
		}
	}
	return fixed, perRow
}
