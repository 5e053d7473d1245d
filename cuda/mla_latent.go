package cuda

import (
	"fmt"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// MLA's keys and values straight from the latent (ops.LatentKeys). The tensor-core kernels read each
// head's keys and values as bfloat16 arrays [head][row][qkp] and [head][row][vp]. Before, the forward
// computed kv = kv_b_proj(c_kv) as a float32 activation (24,576 values a row in K3) and k_mla_prep copied
// it into those arrays: at 262,144 tokens about 26 GB written by the MatMul and read again by the copy,
// some 14 ms of k_mla_prep a layer (docs/records/run109). Now a group of heads' keys and values come from
// two batched cuBLASLt calls over the latent (cublaslt_batch.go: one matrix a head, the head's kv_b rows
// as the weight, bfloat16 outputs rounded by the epilogue written at the arrays' row pitch), and
// k_mla_shared_keys adds the shared key columns and the padding. Each key and value is then one float32
// sum over the latent in the pinned configuration's fixed order, rounded once to bfloat16: the value
// k_mla_prep made of MatMul's output wherever the two configurations sum in the same order, and the same
// bits whatever the rows, the slice or the part a row falls in (a carried prefix is expanded by the same
// calls), as ops.LatentKeys asks.

// latentKey is a head shape MLAFromLatent answered for.
type latentKey struct{ heads, nope, shared, vdim, kvLora int }

// latentPlan is the answer: why the keys do not come from the latent ("" when they do).
type latentPlan struct{ why string }

var _ ops.LatentKeys = (*Backend)(nil)

// MLAFromLatent reports whether MLALatent and MLASlice with kv nil run for these sizes (ops.LatentKeys):
// in BF16 precision on the tensor-core kernels with cuBLASLt, unless Options.MLAExpandedKeys, for head
// sizes whose batched calls have a pinned configuration at every batch count they can take (nope and
// vdim multiples of 8).
func (b *Backend) MLAFromLatent(heads, nope, shared, vdim, kvLora int) bool {
	var p latentPlan
	if err := b.ex.Do(func() error {
		var err error
		p, err = b.latentPlanFor(latentKey{heads, nope, shared, vdim, kvLora})
		return err
	}); err != nil {
		return false
	}
	return p.why == ""
}

// latentPlanFor answers MLAFromLatent on the CUDA thread, once a shape: the batched plans are made for
// every batch count mlaTC can use (heads in k groups of one size, ceil(heads / k) each, for every k), so
// that a count no configuration fits turns the keys from the latent off for the shape before any wave
// instead of failing a call inside one.
func (b *Backend) latentPlanFor(key latentKey) (latentPlan, error) {
	if p, ok := b.latentKeys[key]; ok {
		return p, nil
	}
	tc, isTC := b.mlaTCKernel(key.nope+key.shared, key.vdim)
	var p latentPlan
	switch {
	case !isTC:
		p.why = "MLA does not run on the tensor-core kernels here"
	case b.lt == nil:
		p.why = "no cuBLASLt"
	case b.opts.MLAExpandedKeys:
		p.why = "Options.MLAExpandedKeys"
	case key.nope <= 0 || key.nope%8 != 0 || key.vdim%8 != 0 || key.kvLora <= 0 || key.kvLora%8 != 0 || key.heads <= 0:
		p.why = fmt.Sprintf("nope %d, vdim %d, latent %d: the batched outputs and weights need multiples of 8", key.nope, key.vdim, key.kvLora)
	default:
		for _, count := range latentCounts(key.heads) {
			kp, vp, err := b.latentShapes(tc, key, count)
			if err != nil {
				return p, err
			}
			if !kp.ok || !vp.ok {
				p.why = fmt.Sprintf("no batched configuration for a batch of %d heads: %s%s", count, kp.why, vp.why)
				break
			}
		}
	}
	if b.latentKeys == nil {
		b.latentKeys = map[latentKey]latentPlan{}
	}
	b.latentKeys[key] = p
	return p, nil
}

// latentCounts are the batch counts mlaTC's groups of heads can have: ceil(heads / k) for k groups,
// k = 1 .. heads, each once, largest first.
func latentCounts(heads int) []int {
	var out []int
	for k := 1; k <= heads; k++ {
		if c := (heads + k - 1) / k; len(out) == 0 || c != out[len(out)-1] {
			out = append(out, c)
		}
	}
	return out
}

// latentShapes returns the batched plans of count heads' keys (nope outputs at the key arrays' pitch qkp)
// and values (vdim outputs at pitch vp), each head's rows of kv_b (nope + vdim of them, kvLora wide) one
// matrix of the batch.
func (b *Backend) latentShapes(tc mlaTCKernel, key latentKey, count int) (kp, vp *ltShape, err error) {
	stride := int64(key.nope+key.vdim) * int64(key.kvLora)
	if kp, err = b.lt.batchShape(key.nope, key.kvLora, ltBatching{ldd: tc.qkp, strideW: stride, count: count}); err != nil {
		return nil, nil, err
	}
	vp, err = b.lt.batchShape(key.vdim, key.kvLora, ltBatching{ldd: tc.vp, strideW: stride, count: count})
	return kp, vp, err
}

// MLALatent is MLA with kv = latent times kvb transposed, expanded inside the op (ops.LatentKeys).
func (b *Backend) MLALatent(q, latent, ks, kvb ops.Tensor, heads, nope, shared, vdim int, l ops.Layout) (ops.Tensor, error) {
	const op = "MLA"
	ts, err := b.tensors(op, []string{"q", "latent", "ks", "kvb"}, q, latent, ks, kvb)
	if err != nil {
		return nil, err
	}
	if err := ops.CheckMLALatent(q, latent, ks, kvb, heads, nope, shared, vdim, l); err != nil {
		return nil, err
	}
	if err := b.latentReady(ts[1], ts[3], heads, nope, shared, vdim); err != nil {
		return nil, err
	}
	return b.mla(ts[:3], heads, nope, shared, vdim, l, 0, nil, ts[3])
}

// latentReady checks what the CUDA backend needs beyond the shapes: float32 latents, a bfloat16 kv_b, and
// MLAFromLatent's yes for the sizes.
func (b *Backend) latentReady(lt, wt *Tensor, heads, nope, shared, vdim int) error {
	const op = "MLA"
	if lt.dt != dtF32 || wt.dt != dtBF16 {
		return argErr(op, "latent %v and kv_b %v: want a float32 activation and a bfloat16 weight", lt, wt)
	}
	if !b.MLAFromLatent(heads, nope, shared, vdim, lt.cols) {
		return argErr(op, "keys from the latent are not available for %d heads of %d + %d / %d (ops.LatentKeys: MLAFromLatent is false)", heads, nope, shared, vdim)
	}
	return nil
}

// latentPart is a run of latent rows (bfloat16, the plan's ldb apart) whose keys go to rows off.. of the
// key arrays.
type latentPart struct {
	lat       uint64
	rows, off int
}

// latentExpansion is what one mlaTC call's groups of heads share: the batched plans of count heads' keys
// and values, and the latents' bfloat16 copies at those plans' row pitch.
type latentExpansion struct {
	tc     mlaTCKernel
	key    latentKey
	count  int
	kp, vp *ltShape
	parts  []latentPart
}

// newLatentExpansion plans the batched calls for groups of count heads and takes the bfloat16 copies
// (narrow.go, made once) of the latents of ts: ts[1], and ts[3] after n0 rows when there are two sources.
func (c *opCtx) newLatentExpansion(tc mlaTCKernel, key latentKey, count int, ts []*Tensor, n0 int) (*latentExpansion, error) {
	kp, vp, err := c.b.latentShapes(tc, key, count)
	if err != nil {
		return nil, err
	}
	if !kp.ok || !vp.ok {
		return nil, fmt.Errorf("%w: MLA: no batched cuBLASLt configuration for %d heads of keys from the latent: %s%s", ErrInternal, count, kp.why, vp.why)
	}
	x := &latentExpansion{tc: tc, key: key, count: count, kp: kp, vp: vp, parts: []latentPart{{rows: ts[1].rows}}}
	if len(ts) == 5 {
		x.parts = append(x.parts, latentPart{rows: ts[3].rows, off: n0})
	}
	for i := range x.parts {
		if x.parts[i].lat, err = c.narrowOf(ts[1+2*i], kp.ldb); err != nil {
			return nil, err
		}
	}
	return x, nil
}

// expand writes the keys and values of the count heads from head g0 on into kb, vb (k_mla_prep's layout,
// rows key rows a head): the two batched calls for each part of the latent, w being kv_b, then the shared
// key columns (ks for rows below n0, ks2 from n0 on) and the padding.
func (x *latentExpansion) expand(c *opCtx, g0 int, kb, vb, w, ks, ks2 uint64, rows, n0 int) error {
	tc, nope, vdim, kvLora := x.tc, x.key.nope, x.key.vdim, x.key.kvLora
	wk := w + uint64(2*g0*(nope+vdim)*kvLora)
	wv := wk + uint64(2*nope*kvLora)
	for _, p := range x.parts {
		if p.rows == 0 {
			continue
		}
		if err := c.batchGemm(x.kp, kb+uint64(2*p.off*tc.qkp), p.lat, wk, p.rows, nope, kvLora, int64(rows)*int64(tc.qkp)); err != nil {
			return err
		}
		if err := c.batchGemm(x.vp, vb+uint64(2*p.off*tc.vp), p.lat, wv, p.rows, vdim, kvLora, int64(rows)*int64(tc.vp)); err != nil {
			return err
		}
	}
	w8 := (tc.qkp - nope + tc.vp - vdim) / 8
	n := x.count * rows * w8
	if n == 0 {
		return nil
	}
	return c.launch("k_mla_shared_keys", d1((n+255)/256), d1(256), 0, kb, vb, ks, ks2, int64(rows), int64(n0), int32(x.count),
		int32(nope), int32(x.key.shared), int32(tc.qkp), int32(vdim), int32(tc.vp))
}
