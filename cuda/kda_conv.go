package cuda

import (
	"fmt"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// KDA with its short convolutions (ops.KDAConv). Where KDA runs k_kda_prep4 (versions 5 to 8: BF16
// precision by default), q and k are convolved inside the prep (k_kda_convprep4, kda.cu item 8: each
// staged value is shortconv_at's, k_shortconv's statement), so their convolutions are never written out
// and read back; v is convolved by ShortConvSiLU first, as the recurrence reads it row by row. The values
// are ShortConvSiLU's and the prep's, so the result equals the contract's unfused ops bit for bit.
// Everything else (versions 2 to 4, FP32 precision by default; arguments the unfused ops would refuse or
// that are not this backend's live tensors) runs the unfused ops themselves, so the contract and the
// errors hold by construction there.

var _ ops.KDAConv = (*Backend)(nil)

// KDAConv implements ops.KDAConv: KDA(ShortConvSiLU(q, qConv, l), ShortConvSiLU(k, kConv, l),
// ShortConvSiLU(v, vConv, l), graw, braw, aLog, dtBias, heads, lower, l), fused as above where it can be.
func (b *Backend) KDAConv(q, k, v, qConv, kConv, vConv, graw, braw, aLog, dtBias ops.Tensor, heads int, lower float32, l ops.Layout) (ops.Tensor, error) {
	conv, why := b.kdaConvFusable(q, k, v, qConv, kConv, vConv, graw, braw, aLog, dtBias, heads, l)
	if why != "" {
		return b.kdaConvUnfused(q, k, v, qConv, kConv, vConv, graw, braw, aLog, dtBias, heads, lower, l)
	}
	vc, err := b.ShortConvSiLU(v, vConv, l)
	if err != nil {
		return nil, fmt.Errorf("KDAConv: v: %w", err)
	}
	defer b.Free(vc)
	return b.kda("KDAConv", q, k, vc, graw, braw, aLog, dtBias, heads, lower, l, conv)
}

// kdaConvFusable returns the fused prep's inputs when the fused path can run the call, else why not. A
// choice by the KDA version (the precision and the options), the arguments' kinds and shapes, never by
// the number of rows.
func (b *Backend) kdaConvFusable(q, k, v, qConv, kConv, vConv, graw, braw, aLog, dtBias ops.Tensor, heads int, l ops.Layout) (*kdaConvIn, string) {
	if b.kdaVersion() < 5 {
		return nil, "KDA's version has no fused prep (k_kda_prep4 runs from version 5)"
	}
	var ts [6]*Tensor
	for i, x := range []ops.Tensor{q, k, v, qConv, kConv, vConv} {
		t, ok := x.(*Tensor)
		if !ok || t == nil || t.b != b || t.freed {
			return nil, "an argument is not a live tensor of this backend (the unfused ops say which)"
		}
		ts[i] = t
	}
	for i := range 3 {
		x, w := ts[i], ts[3+i]
		if x.dt != dtF32 || w.rows != x.cols || w.cols == 0 || w.cols != ts[3].cols {
			return nil, "the convolutions' shapes do not fit (the unfused ops say how)"
		}
	}
	if ops.CheckKDA(q, k, v, graw, braw, aLog, dtBias, heads, l) != nil {
		return nil, "KDA's arguments do not fit (the unfused ops say how)"
	}
	return &kdaConvIn{qConv: ts[3], kConv: ts[4], start: rowStarts(l, ts[0].rows)}, ""
}

// kdaConvUnfused runs the ops of the contract, freeing the convolutions.
func (b *Backend) kdaConvUnfused(q, k, v, qConv, kConv, vConv, graw, braw, aLog, dtBias ops.Tensor, heads int, lower float32, l ops.Layout) (ops.Tensor, error) {
	var cs [3]ops.Tensor
	for i, p := range [3][2]ops.Tensor{{q, qConv}, {k, kConv}, {v, vConv}} {
		c, err := b.ShortConvSiLU(p[0], p[1], l)
		if err != nil {
			return nil, fmt.Errorf("KDAConv (unfused): %s: %w", []string{"q", "k", "v"}[i], err)
		}
		defer b.Free(c)
		cs[i] = c
	}
	y, err := b.KDA(cs[0], cs[1], cs[2], graw, braw, aLog, dtBias, heads, lower, l)
	if err != nil {
		return nil, fmt.Errorf("KDAConv (unfused): %w", err)
	}
	return y, nil
}

// kdaConvPrep launches k_kda_convprep4 over rows x heads pairs of head width d: k_kda_prep4's launch
// (kdaPrep) with P row indices more of shared memory; in is KDA's inputs as float32 (q and k raw).
func (c *opCtx) kdaConvPrep(conv *kdaConvIn, qn, kn, dec, beta uint64, in []uint64, rows, heads, d int, lower, scale float32) error {
	wq, err := c.f32(conv.qConv)
	if err != nil {
		return err
	}
	wk, err := c.f32(conv.kConv)
	if err != nil {
		return err
	}
	sp, err := uploadTemp(c, conv.start)
	if err != nil {
		return err
	}
	p, pairs := kdaPrepPairs(d), rows*heads
	return c.launch("k_kda_convprep4", d1((pairs+p-1)/p), d1(128), 8*p+4*(2*p*(d+1)+4*p),
		qn, kn, dec, beta, in[0], in[1], in[3], in[4], in[5], in[6], int64(pairs), int32(heads), int32(d), int32(p), lower, scale,
		wq, wk, sp, int32(conv.qConv.cols), c.b.bf)
}
