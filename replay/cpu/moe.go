package cpu

import (
	"fmt"
	"slices"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Expert is the CPU backend's ops.Expert: one routed expert's three matrices, decoded from MXFP4 to
// float32 at upload (exact: every E2M1 value times a power of two is a float32).
type Expert struct {
	id          int
	latent, ffn int
	w1, w3      []float32 // gate and up: ffn x latent
	w2          []float32 // down: latent x ffn
	freed       bool
}

// ID is the expert's index in its layer.
func (e *Expert) ID() int { return e.id }

// UploadExpert decodes expert id's MXFP4 matrices (K3_SPEC.md section 4) with checkpoint.DecodeMXFP4:
// w1 and w3 are ffn x latent, w2 is latent x ffn. A scale byte of 255, or a byte count that does not fit
// the shape, is an error naming the matrix.
func (b *Backend) UploadExpert(id, latent, ffn int, w1Packed, w1Scale, w3Packed, w3Scale, w2Packed, w2Scale []byte) (ops.Expert, error) {
	const op = "UploadExpert"
	if id < 0 || latent <= 0 || ffn <= 0 || latent%2 != 0 || ffn%2 != 0 {
		return nil, shapeErr(op, "expert %d: latent %d, ffn %d: want positive even sizes", id, latent, ffn)
	}
	e := &Expert{id: id, latent: latent, ffn: ffn,
		w1: make([]float32, ffn*latent), w3: make([]float32, ffn*latent), w2: make([]float32, latent*ffn)}
	mats := []struct {
		name           string
		dst            []float32
		packed, scales []byte
		rows, cols     int
	}{
		{"w1", e.w1, w1Packed, w1Scale, ffn, latent},
		{"w3", e.w3, w3Packed, w3Scale, ffn, latent},
		{"w2", e.w2, w2Packed, w2Scale, latent, ffn},
	}
	for _, m := range mats {
		if err := checkpoint.DecodeMXFP4(m.dst, m.packed, m.scales, m.rows, m.cols); err != nil {
			return nil, fmt.Errorf("%w: %s: expert %d %s (%dx%d): %w", ErrArgument, op, id, m.name, m.rows, m.cols, err)
		}
	}
	return e, nil
}

// Route is the router (K3_SPEC.md 5.5 steps 1-3), all in float32. Per row r:
//
//	s[e] = sigmoid(sum_p float32(x[r,p] * w[e,p]))   // ascending p, as MatMul but never rounded
//	chosen = the k experts with the largest s[e] + bias[e], ordered by that value descending, ties to the lower id
//	sum := float32(0); for _, e := range chosen { sum += s[e] }   // selection order
//	weight[e] = (s[e] / (sum + 1e-20)) * scale
//
// w is experts x cols and bias 1 x experts; 1 <= k <= experts.
func (b *Backend) Route(x, w, bias ops.Tensor, k int, scale float32) (ops.Routing, error) {
	began := b.opStart()
	const op = "Route"
	ts, err := tensors(op, []string{"x", "w", "bias"}, x, w, bias)
	if err != nil {
		return ops.Routing{}, err
	}
	if err := ops.CheckRoute(x, w, bias, k); err != nil {
		return ops.Routing{}, err
	}
	xt, wt, bt := ts[0], ts[1], ts[2]
	experts := wt.rows
	rows := xt.rows
	rt := ops.Routing{K: k, IDs: make([]int32, rows*k), Weights: make([]float32, rows*k)}
	logits := make([]float32, min(routeChunk, rows)*experts) // bounded: a chunk of rows at a time
	for r0 := 0; r0 < rows; r0 += routeChunk {
		n := min(routeChunk, rows-r0)
		b.gemm(logits, xt.data[r0*xt.cols:], n, wt.data, experts, xt.cols, false)
		b.routeRows(rt, logits, bt.data, r0, n, scale)
	}
	if err := b.interrupted(op, began); err != nil {
		return ops.Routing{}, err
	}
	return rt, nil
}

// routeChunk is the number of rows whose router logits exist at once.
const routeChunk = 256

// routeRows chooses the experts of rows r0..r0+n-1 from their logits (n x experts), as Route documents.
func (b *Backend) routeRows(rt ops.Routing, logits, bias []float32, r0, n int, scale float32) {
	k, experts := rt.K, len(bias)
	b.parallelRange(n, 16, func(lo, hi int) {
		biased := make([]float32, experts)
		for i := lo; i < hi; i++ {
			r := r0 + i
			s := logits[i*experts : (i+1)*experts]
			for e, l := range s {
				s[e] = sigmoid(l)
				biased[e] = s[e] + bias[e]
			}
			ids, ws := rt.IDs[r*k:(r+1)*k], rt.Weights[r*k:(r+1)*k]
			topK(biased, ids)
			var sum float32
			for _, e := range ids {
				sum += s[e]
			}
			for j, e := range ids {
				ws[j] = (s[e] / (sum + 1e-20)) * scale
			}
		}
	})
}

// topK fills ids with the len(ids) indices of the largest vals, by descending value, equal values in
// ascending index (the scan is in ascending index and an equal value never passes one already kept).
// Callers ensure len(vals) >= len(ids). With NaN among vals the choice is unspecified (but deterministic).
func topK(vals []float32, ids []int32) {
	k, n := len(ids), 0
	for i, v := range vals {
		if n == k && !(v > vals[ids[k-1]]) {
			continue
		}
		p := n
		for p > 0 && v > vals[ids[p-1]] {
			p--
		}
		if n < k {
			n++
		}
		copy(ids[p+1:n], ids[p:n-1])
		ids[p] = int32(i)
	}
}

// ExpertsAccumulate adds the weighted outputs of the given experts into acc (see ops.Backend). For every
// row r and every expert e among experts that r chose (in ascending id, whatever the order of experts):
//
//	a = rounded(W1_e z[r]); c = rounded(W3_e z[r])        // as MatMul
//	h = rounded(W2_e rounded(situ(a, c)))                   // as SiTUGLU, then MatMul
//	acc[r,:] += float32(weight(r,e) * h)                    // float32, never rounded
//
// so it equals MatMul, MatMul, SiTUGLU, MatMul and an Add in float32, bit for bit, and calls on disjoint
// expert subsets in ascending id order equal one call. Rows that chose an expert not in experts skip it.
func (b *Backend) ExpertsAccumulate(acc, z ops.Tensor, rt ops.Routing, experts []ops.Expert, beta, linBeta float32) error {
	began := b.opStart()
	const op = "ExpertsAccumulate"
	ts, err := tensors(op, []string{"acc", "z"}, acc, z)
	if err != nil {
		return err
	}
	at, zt := ts[0], ts[1]
	rows, latent := zt.rows, zt.cols
	if err := ops.CheckExpertsAccumulate(acc, z, rt, beta, linBeta); err != nil {
		return err
	}
	es := make([]*Expert, len(experts))
	for i, x := range experts {
		e, ok := x.(*Expert)
		switch {
		case !ok || e == nil:
			return argErr(op, "experts[%d] is a %T, not a cpu expert", i, x)
		case e.freed:
			return fmt.Errorf("%w: %s: expert %d", ErrFreed, op, e.id)
		case e.latent != latent:
			return shapeErr(op, "expert %d has latent width %d, z %v", e.id, e.latent, zt)
		}
		es[i] = e
	}
	slices.SortFunc(es, func(p, q *Expert) int { return p.id - q.id })
	ids := make([]int, len(es))
	for i, e := range es {
		ids[i] = e.id
	}
	work, err := rt.AssignRows(ids, rows)
	if err != nil {
		return argErr(op, "%v", err)
	}
	b.runExperts(at.data, zt.data, latent, es, work, beta, linBeta)
	if err := b.interrupted(op, began); err != nil {
		return err
	}
	return nil
}
