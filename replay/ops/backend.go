package ops

// Backend is the set of operations the K3 forward pass needs. A method returns an error rather than
// panicking on shapes it cannot handle; shapes are checked by the model before calling.
//
// Where a formula below leaves the float32 evaluation order open (a norm factor taken out of a sum, a
// division done as a multiplication by a reciprocal), backends may differ at rounding level: each backend
// fixes and documents its order, so that its own results never depend on the wave, the chunking or the
// thread count, and backends are compared with a tolerance (package ops/opstest).
type Backend interface {
	// Name identifies the backend ("cpu", "cuda") in results and errors.
	Name() string
	// Precision is the rounding mode this backend instance was made with.
	Precision() Precision

	// Upload makes a rows x cols weight tensor from little-endian raw bytes of dtype dt, decoded exactly.
	// Upload and UploadExpert keep no reference to their byte slices once they return (the engine reuses
	// its read buffers from layer to layer) and never write to them (the engine's host cache hands the
	// same bytes to every wave).
	Upload(dt DType, rows, cols int, raw []byte) (Tensor, error)
	// UploadExpert makes routed expert id from its MXFP4 matrices (K3_SPEC.md section 4): w1 (gate) and
	// w3 (up) are ffn x latent, w2 (down) is latent x ffn; packed holds two 4-bit codes a byte, scale one
	// E8M0 byte per 32 columns. A scale byte of 255 is an error.
	UploadExpert(id, latent, ffn int, w1Packed, w1Scale, w3Packed, w3Scale, w2Packed, w2Scale []byte) (Expert, error)
	// FromHost makes an activation tensor from float32 values (rows x cols, row-major), rounded.
	FromHost(rows, cols int, data []float32) (Tensor, error)
	// ToHost copies a tensor's values out as float32, row-major.
	ToHost(t Tensor) ([]float32, error)
	// Free releases a tensor or expert's storage; using it afterwards is an error. Free(nil) and a second
	// Free of the same object are no-ops.
	Free(t any)

	// Gather returns rows ids of table: out[i,:] = table[ids[i],:], an exact copy (no rounding), whether
	// table is a weight (the embedding, bf16 exact) or an activation or float32 accumulator. An id outside
	// the table is an error.
	Gather(table Tensor, ids []int32) (Tensor, error)
	// MatMul returns x times w transposed: out[i,j] = rounded(sum_k x[i,k] * w[j,k]), the sum in float32 in
	// ascending k (a backend may block the sum, the same blocking for every row). x: n x k, w: m x k.
	MatMul(x, w Tensor) (Tensor, error)
	// Slice returns columns from .. to-1 of x (a copy; no rounding).
	Slice(x Tensor, from, to int) (Tensor, error)
	// Add returns rounded(a + b), elementwise.
	Add(a, b Tensor) (Tensor, error)
	// RMSNorm normalises each group of g = w.Cols() consecutive columns of every row (w is 1 x g, g divides
	// x.Cols()): n = rounded(v * r) with r = 1/sqrt(mean(v^2) + eps) computed once per group in float32
	// (the reference's x * rsqrt(mean + eps), K3_SPEC.md section 3), out = rounded(n * w), where v is x
	// rounded as it is read: a no-op on activations, which hold rounded values, and the reference's
	// rounding of the routed experts' float32 sum before their norm (ExpertsAccumulate's acc goes in as is).
	RMSNorm(x, w Tensor, eps float32) (Tensor, error)
	// GatedRMSNorm is the fused form of MulSigmoid(RMSNorm(x, w, eps), gate) and must equal it bit for bit
	// (gate has x's shape). KDA's per-head output norm and gate use it.
	GatedRMSNorm(x, w, gate Tensor, eps float32) (Tensor, error)
	// MulSigmoid returns rounded(x * sigmoid(gate)) elementwise, in float32.
	MulSigmoid(x, gate Tensor) (Tensor, error)

	// AttnResMix mixes a list of vectors per row (AttnRes, K3_SPEC.md 5.1): for each row r,
	// score_i = sum_d wg[d] * vs[i][r,d] / sqrt(mean_d vs[i][r,d]^2 + 1e-5) (wg is 1 x cols: the res_norm
	// weight times the res_proj row, folded in float32), p = softmax_i(score), out[r,:] =
	// rounded(sum_i p_i vs[i][r,:]) summed in ascending i; all in float32. It also returns p (rows x len(vs)).
	AttnResMix(vs []Tensor, wg Tensor) (out Tensor, weights []float32, err error)

	// ShortConvSiLU is the causal depthwise convolution of KDA with SiLU, per sequence of the layout:
	// out[t,c] = rounded(silu(sum_{i<K} w[c,i] * x[t-K+1+i,c])), x before the sequence start = 0.
	// w is channels x K (float32 taps).
	ShortConvSiLU(x, w Tensor, l Layout) (Tensor, error)
	// KDA runs the gated delta rule per sequence and head (K3_SPEC.md 5.2 steps 3-6), all in float32:
	// heads of width d = q.Cols()/heads; q and k of each head L2-normalised (x / sqrt(sum x^2 + 1e-6)), q
	// scaled by d^-0.5; per channel gate g[t] = lower * sigmoid(exp(aLog[h]) * (graw[t] + dtBias)) (aLog: any
	// shape with at least `heads` entries, row-major, the first `heads` used; dtBias: 1 x channels; braw:
	// rows x heads); beta[t,h] = sigmoid(braw[t,h]); state S (d x d, zero at each sequence start):
	// S = diag(exp(g)) S; u = beta (v - S^T k); S += k u^T; o = S^T q. Returns o rounded (rows x channels).
	KDA(q, k, v, graw, braw Tensor, aLog, dtBias Tensor, heads int, lower float32, l Layout) (Tensor, error)
	// MLA is causal softmax attention per sequence and head with no positional encoding (K3_SPEC.md 5.3):
	// q is rows x heads*(nope+shared) (per head [q_nope | q_s]); kv is rows x heads*(nope+vdim) (per head
	// [k_nope | v]); ks is rows x shared (one key slot shared by all heads). Key of head h at s is
	// [k_nope_h(s) ; ks(s)]; score = q.k / sqrt(nope+shared) in float32; softmax over s <= t; out =
	// rounded(sum_s p v_h(s)), rows x heads*vdim.
	MLA(q, kv, ks Tensor, heads, nope, shared, vdim int, l Layout) (Tensor, error)

	// SiTUGLU returns rounded(situ(gate) * lin(up)) elementwise in float32, with situ(a) =
	// beta tanh(a/beta) sigmoid(a) and lin(b) = linBeta tanh(b/linBeta) (K3_SPEC.md 5.4).
	SiTUGLU(gate, up Tensor, beta, linBeta float32) (Tensor, error)

	// Route runs the router in float32 (K3_SPEC.md 5.5 steps 1-3): s = sigmoid(x w^T) with w upcast, the k
	// largest s + bias chosen and listed by that value descending (exact ties to the lower id), weights
	// s / (sum chosen s + 1e-20) * scale with the sum in that selection order. w: experts x cols, bias:
	// 1 x experts (float32), 1 <= k <= experts. The result is on the host: it decides what to read.
	Route(x, w, bias Tensor, k int, scale float32) (Routing, error)
	// ExpertsAccumulate adds, for every row r and every expert e in experts that r chose, in ascending
	// expert id, weight(r,e) * rounded(W2_e situ(W1_e z[r], W3_e z[r])) into acc[r,:] in float32 (acc is
	// never rounded; an expert's output is, and its SiTU activations are rounded before W2 as in MatMul).
	// W1_e z and W3_e z are matmul outputs, rounded as MatMul's. The experts slice may come in any order
	// (the ascending id order is the backend's to keep); a row that chose an expert not in experts skips
	// it; an expert given twice is an error. Calling it on disjoint expert subsets in ascending id order
	// equals one call with all of them.
	ExpertsAccumulate(acc, z Tensor, r Routing, experts []Expert, beta, linBeta float32) error
	// Zeros returns a rows x cols tensor of zeros (an accumulator).
	Zeros(rows, cols int) (Tensor, error)
	// Round returns rounded(x): it ends an fp32 accumulation.
	Round(x Tensor) (Tensor, error)

	// TokenStats reduces logits = rounded(h w^T) (w: vocab x cols, the lm_head) row by row without holding
	// more than a chunk of rows x vocab: log-softmax in float32 (max-shifted; the sums of exp may run in
	// float64, as the CPU backend's do), entropy, the target's log probability and rank (targets[r] < 0:
	// none; a target >= vocab is an error), and the top k (0 <= k <= vocab). Rank and top k compare the
	// rounded logits: the rank counts strictly larger ones, and the top k are ordered by logit descending,
	// equal logits by ascending id (so two ids whose float32 logprobs round equal keep their logit order).
	// Results are on the host.
	TokenStats(h, w Tensor, targets []int32, k int) ([]TokenStats, error)
}
