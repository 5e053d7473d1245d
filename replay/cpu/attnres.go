package cpu

import (
	"fmt"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// AttnResMix mixes the vectors vs (each rows x cols) per row with softmax weights (K3_SPEC.md 5.1), all in
// float32. For row r, with n = len(vs) and the sums in ascending index order:
//
//	inv_i   := float32(1 / sqrt(sum_d float32(v_i[d]^2) / cols + 1e-5))
//	score_i := (sum_d float32(wg[d] * v_i[d])) * inv_i   // the norm factor taken out of the sum
//	p_i     := e_i / sum_j e_j,  e_i = float32(exp(score_i - max_j score_j))
//	out[d]  := rounded(sum_i float32(p_i * v_i[d]))     // ascending i
//
// The returned weights are p, rows x n row-major (p of row r and vector i at r*n+i).
func (b *Backend) AttnResMix(vs []ops.Tensor, wg ops.Tensor) (ops.Tensor, []float32, error) {
	began := b.opStart()
	const op = "AttnResMix"
	wt, err := tensor(op, "wg", wg)
	if err != nil {
		return nil, nil, err
	}
	v := make([]*Tensor, len(vs))
	for i, x := range vs {
		if v[i], err = tensor(op, fmt.Sprintf("vs[%d]", i), x); err != nil {
			return nil, nil, err
		}
	}
	if err := ops.CheckAttnResMix(vs, wg); err != nil {
		return nil, nil, err
	}
	rows, cols, n := v[0].rows, v[0].cols, len(v)
	out := newTensor(rows, cols)
	weights := make([]float32, rows*n)
	b.parallelRange(rows, max(1, 2048/max(cols, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			p := weights[r*n : (r+1)*n]
			for i, t := range v {
				x := t.data[r*cols : (r+1)*cols]
				inv := rsqrt32(sumSquares(x)/float32(cols) + 1e-5)
				p[i] = dotAcc(0, wt.data, x) * inv
			}
			softmaxInPlace(p)
			o := out.data[r*cols : (r+1)*cols]
			for i, t := range v {
				x, pi := t.data[r*cols:(r+1)*cols], p[i]
				for d, xd := range x {
					o[d] += float32(pi * xd)
				}
			}
			b.roundAll(o)
		}
	})
	if err := b.interrupted("AttnResMix", began); err != nil {
		return nil, nil, err
	}
	return out, weights, nil
}

// softmaxInPlace replaces s by softmax(s) in float32: max shift, e_i = float32(exp(s_i - max)), the sum in
// ascending i, p_i = e_i / sum. Shared by AttnResMix and MLA.
func softmaxInPlace(s []float32) {
	m := s[0]
	for _, x := range s[1:] {
		m = max(m, x)
	}
	var sum float32
	for i, x := range s {
		s[i] = exp32(x - m)
		sum += s[i]
	}
	for i := range s {
		s[i] /= sum
	}
}
