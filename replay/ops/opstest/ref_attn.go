package opstest

import "math"

// refShortConv: out[t,c] = rd(silu(sum_i w[c,i] x[t-K+1+i,c])), zeros before each sequence's start.
func refShortConv(x, w []float64, ch, kk int, starts []int, rd func(float64) float64) []float64 {
	out := make([]float64, len(x))
	for s := 0; s+1 < len(starts); s++ {
		for t := starts[s]; t < starts[s+1]; t++ {
			for c := range ch {
				var a float64
				for i := range kk {
					if src := t - kk + 1 + i; src >= starts[s] {
						a += w[c*kk+i] * x[src*ch+c]
					}
				}
				out[t*ch+c] = rd(a * sigmoid(a))
			}
		}
	}
	return out
}

// kdaIn are the inputs of KDA as float64 (rows x ch unless noted).
type kdaIn struct {
	q, k, v, graw []float64
	braw          []float64 // rows x heads
	aLog          []float64 // at least heads entries
	dtBias        []float64 // ch
	heads, ch     int
	lower         float64
	starts        []int
}

// kdaPrep are the per-token quantities both recurrence forms share (K3_SPEC.md 5.2 steps 3-5): the
// normalised and scaled q, the normalised k, the log decay g (in (lower, 0)) and beta.
type kdaPrep struct {
	qn, kn, g []float64
	beta      []float64
}

func (in kdaIn) prep() kdaPrep {
	rows, d := len(in.q)/in.ch, in.ch/in.heads
	p := kdaPrep{qn: make([]float64, len(in.q)), kn: make([]float64, len(in.q)), g: make([]float64, len(in.q)),
		beta: make([]float64, rows*in.heads)}
	for t := range rows {
		for h := range in.heads {
			c0 := t*in.ch + h*d
			var sq, sk float64
			for i := range d {
				sq += in.q[c0+i] * in.q[c0+i]
				sk += in.k[c0+i] * in.k[c0+i]
			}
			for i := range d {
				p.qn[c0+i] = in.q[c0+i] / math.Sqrt(sq+1e-6) / math.Sqrt(float64(d))
				p.kn[c0+i] = in.k[c0+i] / math.Sqrt(sk+1e-6)
				p.g[c0+i] = in.lower * sigmoid(math.Exp(in.aLog[h])*(in.graw[c0+i]+in.dtBias[h*d+i]))
			}
			p.beta[t*in.heads+h] = sigmoid(in.braw[t*in.heads+h])
		}
	}
	return p
}

// refKDAStep runs the delta rule token by token: S = diag(e^g) S; u = beta (v - S^T k); S += k u^T;
// o = S^T q. It returns o unrounded.
func refKDAStep(in kdaIn) []float64 {
	p := in.prep()
	d := in.ch / in.heads
	out := make([]float64, len(in.q))
	for s := 0; s+1 < len(in.starts); s++ {
		for h := range in.heads {
			S := make([]float64, d*d)
			for t := in.starts[s]; t < in.starts[s+1]; t++ {
				c0 := t*in.ch + h*d
				for i := range d {
					for j := range d {
						S[i*d+j] *= math.Exp(p.g[c0+i])
					}
				}
				u := make([]float64, d)
				for j := range d {
					var sk float64
					for i := range d {
						sk += S[i*d+j] * p.kn[c0+i]
					}
					u[j] = p.beta[t*in.heads+h] * (in.v[c0+j] - sk)
				}
				for i := range d {
					for j := range d {
						S[i*d+j] += p.kn[c0+i] * u[j]
					}
				}
				for j := range d {
					var o float64
					for i := range d {
						o += S[i*d+j] * p.qn[c0+i]
					}
					out[c0+j] = o
				}
			}
		}
	}
	return out
}

// refKDAChunked is the same recurrence in the chunked form fast kernels use (chunks of 64 tokens). Within a
// chunk starting from state S0, with G_t the cumulative log decay since the chunk start (inclusive):
//
//	A[t][r] = beta_t sum_i k_t[i] k_r[i] e^(G_t[i]-G_r[i])          (r < t)
//	(I + A) U = beta (V - (e^G * K) S0)                              lower-triangular, forward substitution
//	o_t = S0^T (e^G_t * q_t) + sum_{r<=t} (sum_i q_t[i] k_r[i] e^(G_t[i]-G_r[i])) u_r
//	S   = diag(e^G_C) S0 + sum_r diag(e^(G_C-G_r)) k_r u_r^T         carried to the next chunk
//
// It is an independent derivation: agreement with refKDAStep checks the math of both.
func refKDAChunked(in kdaIn) []float64 {
	const chunk = 64
	p := in.prep()
	d := in.ch / in.heads
	out := make([]float64, len(in.q))
	for s := 0; s+1 < len(in.starts); s++ {
		for h := range in.heads {
			S0 := make([]float64, d*d)
			for c0 := in.starts[s]; c0 < in.starts[s+1]; c0 += chunk {
				n := min(chunk, in.starts[s+1]-c0)
				col := func(t, i int) int { return (c0+t)*in.ch + h*d + i } // index of channel i of chunk row t
				G := make([]float64, n*d)
				for t := range n {
					for i := range d {
						G[t*d+i] = p.g[col(t, i)]
						if t > 0 {
							G[t*d+i] += G[(t-1)*d+i]
						}
					}
				}
				decay := func(t, r, i int) float64 { return math.Exp(G[t*d+i] - G[r*d+i]) } // e^(G_t-G_r)
				U := make([]float64, n*d)
				for t := range n {
					beta := p.beta[(c0+t)*in.heads+h]
					for j := range d { // right-hand side
						var sk float64
						for i := range d {
							sk += S0[i*d+j] * math.Exp(G[t*d+i]) * p.kn[col(t, i)]
						}
						U[t*d+j] = beta * (in.v[col(t, j)] - sk)
					}
					for r := range t { // forward substitution: subtract A[t][r] u_r
						var a float64
						for i := range d {
							a += p.kn[col(t, i)] * p.kn[col(r, i)] * decay(t, r, i)
						}
						a *= beta
						for j := range d {
							U[t*d+j] -= a * U[r*d+j]
						}
					}
				}
				for t := range n {
					for j := range d {
						var o float64
						for i := range d {
							o += S0[i*d+j] * math.Exp(G[t*d+i]) * p.qn[col(t, i)]
						}
						out[col(t, j)] = o
					}
					for r := 0; r <= t; r++ {
						var a float64
						for i := range d {
							a += p.qn[col(t, i)] * p.kn[col(r, i)] * decay(t, r, i)
						}
						for j := range d {
							out[col(t, j)] += a * U[r*d+j]
						}
					}
				}
				next := make([]float64, d*d)
				for i := range d {
					for j := range d {
						v := math.Exp(G[(n-1)*d+i]) * S0[i*d+j]
						for r := range n {
							v += decay(n-1, r, i) * p.kn[col(r, i)] * U[r*d+j]
						}
						next[i*d+j] = v
					}
				}
				S0 = next
			}
		}
	}
	return out
}

// mlaIn are MLA's inputs as float64.
type mlaIn struct {
	q, kv, ks                 []float64
	heads, nope, shared, vdim int
	starts                    []int
}

// refMLA builds, per sequence and head, the full T x T score matrix, masks s > t with -Inf, takes a row
// softmax and multiplies by V; outputs rd(P V).
func refMLA(in mlaIn, rd func(float64) float64) []float64 {
	qk, kvw := in.nope+in.shared, in.nope+in.vdim
	rows := len(in.q) / (in.heads * qk)
	out := make([]float64, rows*in.heads*in.vdim)
	for s := 0; s+1 < len(in.starts); s++ {
		t0, T := in.starts[s], in.starts[s+1]-in.starts[s]
		for h := range in.heads {
			key := func(r, i int) float64 {
				if i < in.nope {
					return in.kv[r*in.heads*kvw+h*kvw+i]
				}
				return in.ks[r*in.shared+i-in.nope]
			}
			for t := range T {
				scores := make([]float64, T)
				for r := range T {
					if r > t {
						scores[r] = math.Inf(-1)
						continue
					}
					var dot float64
					for i := range qk {
						dot += in.q[(t0+t)*in.heads*qk+h*qk+i] * key(t0+r, i)
					}
					scores[r] = dot / math.Sqrt(float64(qk))
				}
				p := softmax(scores)
				for j := range in.vdim {
					var o float64
					for r := range T {
						o += p[r] * in.kv[(t0+r)*in.heads*kvw+h*kvw+in.nope+j]
					}
					out[(t0+t)*in.heads*in.vdim+h*in.vdim+j] = rd(o)
				}
			}
		}
	}
	return out
}
