package cpu

import (
	"math"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// ShortConvSiLU is KDA's causal depthwise convolution with SiLU (K3_SPEC.md 5.2 step 2), per sequence of l:
//
//	out[t,c] = rounded(silu(sum_{i<K} float32(w[c,i] * x[t-K+1+i,c])))   // ascending i, silu in float32
//
// with x before the sequence start taken as 0 (those terms are skipped, which gives the same bits: the
// float32 sum starts at +0 and adding ±0 to +0 leaves +0). w is channels x K.
func (b *Backend) ShortConvSiLU(x, w ops.Tensor, l ops.Layout) (ops.Tensor, error) {
	began := b.opStart()
	const op = "ShortConvSiLU"
	ts, err := tensors(op, []string{"x", "w"}, x, w)
	if err != nil {
		return nil, err
	}
	xt, wt := ts[0], ts[1]
	if wt.rows != xt.cols || wt.cols == 0 {
		return nil, shapeErr(op, "x %v with taps %v: want %d x K taps", xt, wt, xt.cols)
	}
	if err := ops.CheckLayout(op, l, xt.rows); err != nil {
		return nil, err
	}
	ch, kk := xt.cols, wt.cols
	start := make([]int, xt.rows) // the first row of each row's sequence
	for s := range l.Sequences() {
		for t := l.Starts[s]; t < l.Starts[s+1]; t++ {
			start[t] = l.Starts[s]
		}
	}
	out := newTensor(xt.rows, ch)
	b.parallelRange(xt.rows, max(1, 8192/max(ch, 1)), func(lo, hi int) {
		for t := lo; t < hi; t++ {
			o := out.data[t*ch : (t+1)*ch]
			for c := range o {
				taps := wt.data[c*kk : (c+1)*kk]
				var s float32
				for i, wi := range taps {
					if src := t - kk + 1 + i; src >= start[t] {
						s += float32(wi * xt.data[src*ch+c])
					}
				}
				o[c] = b.r(silu(s))
			}
		}
	})
	if err := b.interrupted("ShortConvSiLU", began); err != nil {
		return nil, err
	}
	return out, nil
}

// KDA runs the gated delta rule (K3_SPEC.md 5.2 steps 3-6) for every sequence of l and head h, one
// goroutine per (sequence, head) pair, all in float32 with d = channels/heads and c = h*d + i:
//
//	qinv := float32(1/sqrt(sum_i q[t,c]^2 + 1e-6)); qn[i] = float32(q[t,c]*qinv) * float32(1/sqrt(d))
//	kinv := float32(1/sqrt(sum_i k[t,c]^2 + 1e-6)); kn[i] = k[t,c]*kinv
//	dec[i] = exp(lower * sigmoid(exp(aLog[h]) * (graw[t,c] + dtBias[c])))   // float32(exp) each
//	beta := sigmoid(braw[t,h])
//	for i: for j: S[i,j] *= dec[i]; ks[j] += float32(S[i,j] * kn[i])       // ascending i
//	u[j] = beta * (v[t,h*d+j] - ks[j])
//	for i: for j: S[i,j] += float32(kn[i] * u[j]); o[j] += float32(S[i,j] * qn[i])   // ascending i
//	out[t,h*d+j] = rounded(o[j])
//
// Sums of squares run in ascending i. S starts at zero for each sequence. aLog may have any shape with at
// least heads elements (K3 stores 128, padded); dtBias is 1 x channels; braw is rows x heads.
func (b *Backend) KDA(q, k, v, graw, braw ops.Tensor, aLog, dtBias ops.Tensor, heads int, lower float32, l ops.Layout) (ops.Tensor, error) {
	began := b.opStart()
	const op = "KDA"
	ts, err := tensors(op, []string{"q", "k", "v", "graw", "braw", "aLog", "dtBias"}, q, k, v, graw, braw, aLog, dtBias)
	if err != nil {
		return nil, err
	}
	qt, kt, vt, gt, bt, at, dt := ts[0], ts[1], ts[2], ts[3], ts[4], ts[5], ts[6]
	if err := ops.CheckKDA(q, k, v, graw, braw, aLog, dtBias, heads, l); err != nil {
		return nil, err
	}
	out, _ := b.kda(qt, kt, vt, gt, bt, at, dt, heads, lower, l, nil, false)
	if err := b.interrupted(op, began); err != nil {
		return nil, err
	}
	return out, nil
}

// kda runs KDA as documented above. init, when not nil, is the state S of every head (heads x d x d) that
// sequence 0 starts from instead of zero (it continues from an earlier slice); with keepLast the state of
// every head after the last sequence's last row is returned.
func (b *Backend) kda(qt, kt, vt, gt, bt, at, dt *Tensor, heads int, lower float32, l ops.Layout, init []float32, keepLast bool) (*Tensor, []float32) {
	rows, ch := qt.rows, qt.cols
	d := ch / heads
	scale := float32(1 / math.Sqrt(float64(d)))
	out := newTensor(rows, ch)
	seqs := l.Sequences()
	var last []float32
	if keepLast {
		last = make([]float32, heads*d*d)
	}
	b.parallel(seqs*heads, func(task int) {
		s, h := task/heads, task%heads
		st := kdaState{S: make([]float32, d*d), scratch: make([]float32, 6*d), d: d}
		if s == 0 && init != nil {
			copy(st.S, init[h*d*d:(h+1)*d*d])
		}
		a := exp32(at.data[h])
		for t := l.Starts[s]; t < l.Starts[s+1]; t++ {
			if t%1024 == 0 && b.halt() { // one task runs a whole sequence's recurrence for its head
				return
			}
			c0 := t*ch + h*d
			st.step(b, qt.data[c0:c0+d], kt.data[c0:c0+d], vt.data[c0:c0+d], gt.data[c0:c0+d],
				dt.data[h*d:(h+1)*d], a, lower, scale, bt.data[t*heads+h], out.data[c0:c0+d])
		}
		if keepLast && s == seqs-1 {
			copy(last[h*d*d:(h+1)*d*d], st.S)
		}
	})
	return out, last
}

// kdaState is one head's recurrent state and its per-step scratch vectors.
type kdaState struct {
	S       []float32 // d x d, key rows x value columns
	scratch []float32
	d       int
}

// step advances the state by one token and writes the head's output o (rounded), as KDA documents.
func (st *kdaState) step(b *Backend, q, k, v, graw, dtBias []float32, a, lower, scale, braw float32, o []float32) {
	d := st.d
	qn, kn, dec := st.scratch[:d], st.scratch[d:2*d], st.scratch[2*d:3*d]
	ks, u, acc := st.scratch[3*d:4*d], st.scratch[4*d:5*d], st.scratch[5*d:6*d]
	qinv, kinv := rsqrt32(sumSquares(q)+1e-6), rsqrt32(sumSquares(k)+1e-6)
	for i := range d {
		qn[i] = (q[i] * qinv) * scale
		kn[i] = k[i] * kinv
		dec[i] = exp32(lower * sigmoid(a*(graw[i]+dtBias[i])))
	}
	beta := sigmoid(braw)
	clear(ks)
	for i := range d {
		row, di, ki := st.S[i*d:(i+1)*d], dec[i], kn[i]
		ks := ks[:len(row)]
		for j := range row {
			row[j] *= di
			ks[j] += float32(row[j] * ki)
		}
	}
	for j := range u {
		u[j] = beta * (v[j] - ks[j])
	}
	clear(acc)
	for i := range d {
		row, ki, qi := st.S[i*d:(i+1)*d], kn[i], qn[i]
		u, acc := u[:len(row)], acc[:len(row)]
		for j := range row {
			row[j] += float32(ki * u[j])
			acc[j] += float32(row[j] * qi)
		}
	}
	for j, x := range acc {
		o[j] = b.r(x)
	}
}
