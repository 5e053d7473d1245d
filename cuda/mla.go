package cuda

import (
	"math"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// Launch parameters of mla.cu (version 1): a block of 128 threads per (query tile of up to mlaQB rows of
// one sequence, head); keys in chunks of mlaKC rows anchored at the sequence start.
const (
	mlaQB      = 16
	mlaKC      = 32
	mlaThreads = 128
)

// MLA is causal softmax attention per sequence and head without positions (K3_SPEC.md 5.3). With
// qk = nope + shared, per row t of a sequence starting at t0 and per head, in float32, one of two kernels:
//
// Version 1 (k_mla, CUDA cores): FP32 precision, Options.NoTensorCores, and head sizes version 2 does not
// cover:
//
//	score[s] = (sum_i float32(query[i] * key_s[i])) / float32(sqrt(qk))   // ascending i, s in [t0, t]
//	online softmax over key chunks of 32 rows from t0: per chunk, m' = max(m, chunk max),
//	l = l*exp(m-m') + sum e_s, acc = acc*exp(m-m') + sum e_s v_s (e_s = exp(score[s]-m'), ascending s)
//	out[t, h*vdim + j] = rounded(acc[j] / l)
//
// Version 2 (k_mla_tc, tensor cores, mla_tc.cu): BF16 precision when qk <= 192 and vdim <= 128 (the
// inputs are bfloat16 values, so the mma products are exact):
//
//	key blocks of 64 rows from t0; S_s = mma sum of query[i]*key_s[i] over qk chunks of 16 ascending
//	x_s = float32(S_s * float32(log2(e)/sqrt(qk))), -Inf for s > t
//	per block: m' = max(m, block max), alpha = ex2(m - m'), e_s = ex2(x_s - m'),
//	hi_s = bf16(e_s), lo_s = bf16(e_s - hi_s)
//	acc = acc*alpha, then per 16 keys ascending: acc += mma(hi, v), acc += mma(lo, v)
//	lsum[q] = lsum[q]*alpha + sum of its 16 e_s (lane q of 4 holds keys 8n+2q, 8n+2q+1, ascending)
//	out[t, h*vdim + j] = rounded(acc[j] / ((lsum[0]+lsum[1]) + (lsum[2]+lsum[3])))
//
// ex2 is the hardware's ex2.approx.ftz.f32 (about 2 ulp); the mma sums are the tensor cores' fixed float32
// reductions. Splitting e into hi + lo keeps p.v within 2^-17 of float32 instead of bfloat16's 2^-9, which
// by estimate would move a third or more of the outputs by one bfloat16 ulp against the CPU backend; with
// the split 0.1 to 0.3% move (mla_tc.cu says more, also on masked keys inside the diagonal block).
//
// In both, the key grid (and version 2's query tiles of 64 rows) is anchored at the sequence start, so a
// row's bits never depend on the wave; against the CPU backend's two-pass softmax the results differ at
// float32 rounding level (version 1) or at the 2^-17 of the split (version 2), seen in BF16 only where a
// value sits on a bfloat16 rounding boundary.
func (b *Backend) MLA(q, kv, ks ops.Tensor, heads, nope, shared, vdim int, l ops.Layout) (ops.Tensor, error) {
	const op = "MLA"
	ts, err := b.tensors(op, []string{"q", "kv", "ks"}, q, kv, ks)
	if err != nil {
		return nil, err
	}
	if err := ops.CheckMLA(q, kv, ks, heads, nope, shared, vdim, l); err != nil {
		return nil, err
	}
	if b.bf == 1 && !b.opts.NoTensorCores {
		if tc, ok := mlaTCFor(nope+shared, vdim); ok {
			return b.mlaTC(tc, ts, heads, nope, shared, vdim, l)
		}
	}
	return b.mlaCUDACores(ts, heads, nope, shared, vdim, l)
}

// mlaCUDACores launches version 1.
func (b *Backend) mlaCUDACores(ts []*Tensor, heads, nope, shared, vdim int, l ops.Layout) (ops.Tensor, error) {
	const op = "MLA"
	rows, qk := ts[0].rows, nope+shared
	shmem := 4 * (mlaQB*qk + mlaKC*(qk+1) + mlaKC*vdim + mlaQB*mlaKC + mlaQB*vdim + 3*mlaQB)
	if shmem > b.info.MaxSharedOptin {
		return nil, shapeErr(op, "head sizes qk %d, vdim %d need %d bytes of shared memory, the device allows %d", qk, vdim, shmem, b.info.MaxSharedOptin)
	}
	var tasks []int32 // (sequence start, t0, t1) per query tile
	for s := range l.Sequences() {
		for t := l.Starts[s]; t < l.Starts[s+1]; t += mlaQB {
			tasks = append(tasks, int32(l.Starts[s]), int32(t), int32(min(t+mlaQB, l.Starts[s+1])))
		}
	}
	div := float32(math.Sqrt(float64(qk)))
	var out *Tensor
	err := b.run(op, func(c *opCtx) error {
		in, err := c.f32All(ts)
		if err != nil {
			return err
		}
		if out, err = c.out(rows, heads*vdim); err != nil || len(tasks) == 0 {
			return err
		}
		tp, err := uploadTemp(c, tasks)
		if err != nil {
			return err
		}
		return c.launch("k_mla", d2(len(tasks)/3, heads), d1(mlaThreads), shmem,
			out.ptr, in[0], in[1], in[2], tp, int32(heads), int32(nope), int32(shared), int32(vdim), div, b.bf)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
