package opstest

import (
	"math"
	"sort"
)

// The float64 reference loops. They follow the ops contract and K3_SPEC.md literally and share no code
// with any backend; rd is the rounding point (bfloat16 in BF16 precision, identity in FP32).

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// refMatMul: out[i,j] = rd(sum_p x[i,p] w[j,p]).
func refMatMul(x, w []float64, n, m, k int, rd func(float64) float64) []float64 {
	out := make([]float64, n*m)
	for i := range n {
		for j := range m {
			var s float64
			for p := range k {
				s += x[i*k+p] * w[j*k+p]
			}
			out[i*m+j] = rd(s)
		}
	}
	return out
}

// refRMSNorm normalises groups of len(w) columns: rd(rd(v / sqrt(mean v^2 + eps)) * w).
func refRMSNorm(x, w []float64, cols int, eps float64, rd func(float64) float64) []float64 {
	g := len(w)
	out := make([]float64, len(x))
	for q := 0; q < len(x)/g; q++ {
		v := x[q*g : (q+1)*g]
		var ss float64
		for _, e := range v {
			ss += e * e
		}
		den := math.Sqrt(ss/float64(g) + eps)
		for d := range v {
			out[q*g+d] = rd(rd(v[d]/den) * w[d])
		}
	}
	return out
}

// refMulSigmoid: rd(x * sigmoid(gate)).
func refMulSigmoid(x, gate []float64, rd func(float64) float64) []float64 {
	out := make([]float64, len(x))
	for i := range x {
		out[i] = rd(x[i] * sigmoid(gate[i]))
	}
	return out
}

// refSiTU: rd(beta tanh(a/beta) sigmoid(a) * linBeta tanh(b/linBeta)).
func refSiTU(a, b []float64, beta, linBeta float64, rd func(float64) float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = rd(beta * math.Tanh(a[i]/beta) * sigmoid(a[i]) * linBeta * math.Tanh(b[i]/linBeta))
	}
	return out
}

// refAttnRes mixes vs (each rows x cols) per row: scores wg.v / rms(v), softmax, rd(sum p v).
func refAttnRes(vs [][]float64, wg []float64, rows, cols int, rd func(float64) float64) (out, weights []float64) {
	n := len(vs)
	out, weights = make([]float64, rows*cols), make([]float64, rows*n)
	for r := range rows {
		score := make([]float64, n)
		for i, v := range vs {
			x := v[r*cols : (r+1)*cols]
			var ss, dot float64
			for d := range x {
				ss += x[d] * x[d]
				dot += wg[d] * x[d]
			}
			score[i] = dot / math.Sqrt(ss/float64(cols)+1e-5)
		}
		p := softmax(score)
		copy(weights[r*n:], p)
		for d := range cols {
			var s float64
			for i, v := range vs {
				s += p[i] * v[r*cols+d]
			}
			out[r*cols+d] = rd(s)
		}
	}
	return out, weights
}

func softmax(x []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, v)
	}
	out := make([]float64, len(x))
	var s float64
	for i, v := range x {
		out[i] = math.Exp(v - m)
		s += out[i]
	}
	for i := range out {
		out[i] /= s
	}
	return out
}

// refRoute returns, per row, the chosen ids (by biased score descending, ties to the lower id), their
// weights, and the biased scores of every expert (to judge near-ties).
func refRoute(x, w, bias []float64, rows, cols, experts, k int, scale float64) (ids [][]int, weights [][]float64, biased [][]float64) {
	for r := range rows {
		s, bs := make([]float64, experts), make([]float64, experts)
		order := make([]int, experts)
		for e := range experts {
			var dot float64
			for p := range cols {
				dot += x[r*cols+p] * w[e*cols+p]
			}
			s[e] = sigmoid(dot)
			bs[e] = s[e] + bias[e]
			order[e] = e
		}
		sort.SliceStable(order, func(i, j int) bool { return bs[order[i]] > bs[order[j]] })
		chosen := order[:k]
		var sum float64
		for _, e := range chosen {
			sum += s[e]
		}
		ws := make([]float64, k)
		for i, e := range chosen {
			ws[i] = s[e] / (sum + 1e-20) * scale
		}
		ids, weights, biased = append(ids, chosen), append(weights, ws), append(biased, bs)
	}
	return ids, weights, biased
}

// refStats are the reference next-token statistics of one row of logits.
type refStats struct {
	logits  []float64
	lse     float64
	entropy float64
	rank    int       // for the row's target
	order   []int     // all ids by logit descending, ties to the lower id
	logp    []float64 // logp[v] = logits[v] - lse
}

// refTokenStats computes logits = rd(h w^T) and a full float64 log-softmax per row.
func refTokenStats(h, w []float64, rows, cols, vocab int, targets []int32, rd func(float64) float64) []refStats {
	logits := refMatMul(h, w, rows, vocab, cols, rd)
	out := make([]refStats, rows)
	for r := range rows {
		l := logits[r*vocab : (r+1)*vocab]
		m := math.Inf(-1)
		for _, v := range l {
			m = max(m, v)
		}
		var s float64
		for _, v := range l {
			s += math.Exp(v - m)
		}
		lse := m + math.Log(s)
		st := refStats{logits: l, lse: lse, logp: make([]float64, vocab), order: make([]int, vocab)}
		for v := range l {
			st.logp[v] = l[v] - lse
			st.entropy -= math.Exp(st.logp[v]) * st.logp[v]
			st.order[v] = v
		}
		sort.SliceStable(st.order, func(i, j int) bool { return l[st.order[i]] > l[st.order[j]] })
		if t := targets[r]; t >= 0 {
			st.rank = 1
			for _, v := range l {
				if v > l[t] {
					st.rank++
				}
			}
		}
		out[r] = st
	}
	return out
}
