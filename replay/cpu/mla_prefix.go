package cpu

import "github.com/potato-k3/potato-k3/replay/ops"

var _ ops.PrefixSizer = (*Backend)(nil)

// mlaPrefix writes the outputs of sequence 0 of a slice that continues a sequence begun c.rows rows
// before (its first n0 rows) into out. The carry holds the sequence's earlier key latents and shared
// keys (MLASlice); one head at a time, the latents are expanded again to that head's keys and values with
// the rows of kvb that MatMul(latent, kvb) uses for that head, the slice's own keys of the head are put
// after them, and the slice's queries attend as mla's do. gemm computes each element alone in a fixed
// order, whatever the rows and columns beside it, so the keys have the bits of the whole expansion and the
// outputs those of the unsliced op.
//
// One head's keys and values of the sequence so far are alive at a time, not every head's: at K3's widths
// a sequence of 1,048,576 rows takes 1 GiB instead of 64 GiB (MLAPrefixBytes).
func (b *Backend) mlaPrefix(out, qt, kvt, kst, kvb *Tensor, c *carry, heads, nope, shared, vdim, n0 int) {
	kvw, lat := nope+vdim, kvb.cols
	pre, rows := c.rows, c.rows+n0
	kss := make([]float32, 0, rows*shared)
	kss = append(append(kss, c.ks...), kst.data[:n0*shared]...)
	kh := make([]float32, rows*kvw)
	blocks := (n0 + mlaQueryBlock - 1) / mlaQueryBlock
	workers := min(b.threads, blocks)
	scores, accs := make([]float32, workers*rows), make([]float32, workers*vdim)
	for h := range heads {
		if b.halt() {
			return
		}
		b.gemm(kh[:pre*kvw], c.latent, pre, kvb.data[h*kvw*lat:(h+1)*kvw*lat], kvw, lat, b.bf)
		for i := range n0 {
			copy(kh[(pre+i)*kvw:(pre+i+1)*kvw], kvt.data[i*kvt.cols+h*kvw:])
		}
		keys := mlaKeys{kv: kh, stride: kvw, ks: kss}
		b.parallelWorkers(blocks, func(w, i int) {
			t0 := pre + i*mlaQueryBlock
			b.attend(out, qt, keys, h, nope, shared, vdim, t0, min(t0+mlaQueryBlock, rows), pre,
				scores[w*rows:(w+1)*rows], accs[w*vdim:(w+1)*vdim])
		})
	}
}

// MLAPrefixBytes is what MLASlice holds beyond its inputs and output for a slice that continues a
// sequence begun prefix rows before (ops.PrefixSizer): one head's keys and values and every shared key of
// the sequence so far, and a row of scores and values per goroutine (mlaPrefix).
func (b *Backend) MLAPrefixBytes(prefix, heads, nope, shared, vdim, kvLora int) (fixed, perRow int64) {
	if prefix <= 0 {
		return 0, 0
	}
	perRow = 4 * int64(nope+vdim+shared+b.threads)
	return int64(prefix)*perRow + 4*int64(b.threads)*int64(vdim), perRow
}
