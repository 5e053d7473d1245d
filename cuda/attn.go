package cuda

import (
	"fmt"
	"math"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// ShortConvSiLU is KDA's causal depthwise convolution with SiLU per sequence of l (k_shortconv_v2 for 4
// taps and channels a multiple of 4: 4 channels of shortConvRows rows a thread; else k_shortconv, one
// thread per element, grid-stride):
//
//	out[t,c] = rounded(silu(sum_{i<K} float32(w[c,i] * x[t-K+1+i,c])))   // ascending i, rows before t's sequence skipped
//
// the CPU backend's statements, so the two agree bit for bit.
func (b *Backend) ShortConvSiLU(x, w ops.Tensor, l ops.Layout) (ops.Tensor, error) {
	const op = "ShortConvSiLU"
	ts, err := b.tensors(op, []string{"x", "w"}, x, w)
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
	start := make([]int32, xt.rows) // the first row of each row's sequence
	for s := range l.Sequences() {
		for t := l.Starts[s]; t < l.Starts[s+1]; t++ {
			start[t] = int32(l.Starts[s])
		}
	}
	var out *Tensor
	err = b.run(op, func(c *opCtx) error {
		xp, err := c.f32(xt)
		if err != nil {
			return err
		}
		wp, err := c.f32(wt)
		if err != nil {
			return err
		}
		if out, err = c.out(xt.rows, xt.cols); err != nil || out.n() == 0 {
			return err
		}
		sp, err := uploadTemp(c, start)
		if err != nil {
			return err
		}
		return c.shortConv("k_shortconv_v2", shortConvRows, out.ptr, xp, wp, sp, xt.rows, xt.cols, wt.cols, b.bf)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// shortConvRows is the rows of one k_shortconv_v2 thread (kda.cu's SC_ROWS).
const shortConvRows = 4

// shortConv launches kernel, k_shortconv (version 1) or k_shortconv_v2 (rowsPer: its rows a thread,
// shortConvRows), on rows x ch inputs with taps taps a channel. A version 2 kernel falls back to version 1 where its shape
// does not fit (taps other than 4, ch not a multiple of 4, pointers not 16-byte aligned, more than
// 65,535 x 1,024 channels); both give the same bits.
func (c *opCtx) shortConv(kernel string, rowsPer int, out, x, w, start uint64, rows, ch, taps int, bf int32) error {
	if kernel == "k_shortconv" || taps != 4 || ch%4 != 0 || (out|x|w)%16 != 0 || ch/4 > maxGridYZ*ewThreads {
		return c.launch1D("k_shortconv", rows*ch, out, x, w, start, int64(rows), int32(ch), int32(taps), bf)
	}
	return c.launch(kernel, d2((rows+rowsPer-1)/rowsPer, (ch/4+ewThreads-1)/ewThreads), d1(ewThreads), 0,
		out, x, w, start, int64(rows), int32(ch), bf)
}

// KDA runs the gated delta rule per sequence and head (kda.cu version 1) with the CPU backend's loop:
//
//	qinv := float32(1/sqrt(sum_i q[t,c]^2 + 1e-6)); qn[i] = float32(q[t,c]*qinv) * float32(1/sqrt(d))
//	kinv := float32(1/sqrt(sum_i k[t,c]^2 + 1e-6)); kn[i] = k[t,c]*kinv
//	dec[i] = exp(lower * sigmoid(exp(aLog[h]) * (graw[t,c] + dtBias[c]))); beta := sigmoid(braw[t,h])
//	for i: for j: S[i,j] *= dec[i]; ks[j] += float32(S[i,j] * kn[i])                   // ascending i
//	u[j] = beta * (v[t,h*d+j] - ks[j])
//	for i: for j: S[i,j] += float32(kn[i] * u[j]); o[j] += float32(S[i,j] * qn[i])   // ascending i
//	out[t,h*d+j] = rounded(o[j])
//
// In FP32 precision (the audit mode) the two backends agree bit for bit (up to the rare double-precision
// libm difference in exp and sigmoid). In BF16 precision (KDA version 7) the recurrence's three sums (ks,
// S += kn u, o) are fused multiply-adds, each product and sum rounded once instead of twice (kda.cu item
// 5, about 1.2x faster), split over two threads a column and added in a fixed order (item 7), and the prep evaluates dec's exp and sigmoid and beta's sigmoid in single
// precision (k_kda_prep4, kda.cu item 6) instead of in double rounded once: dec and beta are within a few
// float32 ulps of the double-precision values (TestKDAPrep4). So the values differ from the CPU backend's
// at float32 rounding level before the output's bfloat16 rounding, and an output sitting on a bfloat16
// rounding boundary may move by one ulp (about 0.01-0.02% of them on the H200, TestKDAVersion4,
// TestKDAPrep4 and TestAgainstCPU). Each sum still runs in one fixed order (ascending i) per sequence and
// head and every prep value depends on its own row only, so a sequence's bits never depend on the wave in
// either precision.
//
// Launches (kdaVersion): k_kda_prep4 (BF16) or k_kda_prep3 (FP32), kdaPrepPairs(d) (row, head) pairs a
// block of 128 threads; for the recurrence, one block per (sequence, head): for widths 64 and 128 (K3's)
// in BF16 precision k_kda7_rD (d threads, each state column split over two threads that hold two columns
// each, kdaSplit), for width 32 k_kda4_rD; in FP32 precision k_kda3_rD for widths 32, 64 and 128 (d
// threads, the state in registers, a row's second half merged with the next row's first half); else
// k_kda (version 1) with (d*d + 3d) * 4 bytes of dynamic shared memory. Options.KDAVersion and the test
// knob pick another version.
func (b *Backend) KDA(q, k, v, graw, braw ops.Tensor, aLog, dtBias ops.Tensor, heads int, lower float32, l ops.Layout) (ops.Tensor, error) {
	const op = "KDA"
	ts, err := b.tensors(op, []string{"q", "k", "v", "graw", "braw", "aLog", "dtBias"}, q, k, v, graw, braw, aLog, dtBias)
	if err != nil {
		return nil, err
	}
	qt := ts[0]
	if err := ops.CheckKDA(q, k, v, graw, braw, aLog, dtBias, heads, l); err != nil {
		return nil, err
	}
	rows, ch := qt.rows, qt.cols
	d := ch / heads
	shmem := 4 * (d*d + 3*d)
	if d > 1024 || shmem > b.info.MaxSharedOptin {
		return nil, shapeErr(op, "head width %d: the state needs %d bytes of shared memory, the device allows %d (and at most 1024 threads)",
			d, shmem, b.info.MaxSharedOptin)
	}
	scale := float32(1 / math.Sqrt(float64(d)))
	starts := make([]int32, len(l.Starts))
	for i, s := range l.Starts {
		starts[i] = int32(s)
	}
	var out *Tensor
	err = b.run(op, func(c *opCtx) error {
		in, err := c.f32All(ts)
		if err != nil {
			return err
		}
		if out, err = c.out(rows, ch); err != nil || out.n() == 0 {
			return err
		}
		n := rows * ch
		qn, err := c.temp(4 * n)
		if err != nil {
			return err
		}
		kn, err := c.temp(4 * n)
		if err != nil {
			return err
		}
		dec, err := c.temp(4 * n)
		if err != nil {
			return err
		}
		beta, err := c.temp(4 * rows * heads)
		if err != nil {
			return err
		}
		if err := c.kdaPrep(b.kdaVersion(), qn, kn, dec, beta, in, rows, heads, d, lower, scale); err != nil {
			return err
		}
		sp, err := uploadTemp(c, starts)
		if err != nil {
			return err
		}
		return c.kdaRecurrence(b.kdaVersion(), out.ptr, qn, kn, dec, beta, in[2], sp, l.Sequences(), heads, d)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// KDAVersion is the kda.cu version this backend's KDA launches (its version list says what each
// changed), for benchmark records.
func (b *Backend) KDAVersion() int { return b.kdaVersion() }

// kdaVersion is the KDA version KDA launches: kdaBF16Version (7: k_kda_prep4's single-precision decay and
// beta, then kda_split's recurrence, each state column over two threads holding two columns) in BF16
// precision, 3 (the CPU backend's bits) in FP32
// precision, or the one a test set (tests compare versions 2 to 8 and time them). Versions 3 and 4 both
// run k_kda_prep3; version 4 is version 5 with the double-precision prep; versions 6-8 are version 5 with
// kda_split's recurrences. The choice depends on the precision alone (and the head width, in
// kdaRecurrence), never on the wave.
func (b *Backend) kdaVersion() int {
	if b.kdaVer != 0 {
		return b.kdaVer
	}
	if b.bf == 1 {
		return kdaBF16Version
	}
	return 3
}

// kdaBF16Version is the KDA version launched in BF16 precision: 7 since run 22 on the H200 (cuda/NOTES.md:
// prep + recurrence at 16 x 4,096 tokens 32.8 ms against version 5's 37.6, 4 x 4,096 8.15 against 9.46,
// one sequence of 4,096 5.36 against 5.29); TestKDADefaultVersion's BF16 case changes with it. A variable only so that
// a test binary can check a candidate default end to end (testbackend_test.go, POTATO_TEST_KDA_VERSION);
// nothing else writes it.
var kdaBF16Version = 7

// maxKDAVersion is the newest kda.cu version (Options.KDAVersion's upper bound).
const maxKDAVersion = 8

// kdaPrepPairs is the number of (row, head) pairs a block of k_kda_prep3 normalises: 16 (one warp sums
// the 32 rows of squares while the SM's other blocks compute), fewer for heads wider than 254 so that the
// staged rows stay within 32 KiB of shared memory.
func kdaPrepPairs(d int) int { return max(1, min(16, 4096/(d+2))) }

// kdaPrep launches the normalisation, decay and beta kernel of version (k_kda_prep4 for 5-8, k_kda_prep3
// for 3 and 4, k_kda_prep before) over rows x heads pairs of head width d; in is KDA's inputs as float32
// (q, k, v, graw, braw, aLog, dtBias).
func (c *opCtx) kdaPrep(version int, qn, kn, dec, beta uint64, in []uint64, rows, heads, d int, lower, scale float32) error {
	if version < 3 {
		return c.launch("k_kda_prep", d1(rows*heads), d1(d), 0,
			qn, kn, dec, beta, in[0], in[1], in[3], in[4], in[5], in[6], int32(heads), int32(d), lower, scale)
	}
	p, pairs := kdaPrepPairs(d), rows*heads
	if version >= 5 {
		return c.launch("k_kda_prep4", d1((pairs+p-1)/p), d1(128), 4*(2*p*(d+1)+4*p),
			qn, kn, dec, beta, in[0], in[1], in[3], in[4], in[5], in[6], int64(pairs), int32(heads), int32(d), int32(p), lower, scale)
	}
	return c.launch("k_kda_prep3", d1((pairs+p-1)/p), d1(128), 4*(2*p*(d+1)+3*p),
		qn, kn, dec, beta, in[0], in[1], in[3], in[4], in[5], in[6], int64(pairs), int32(heads), int32(d), int32(p), lower, scale)
}

// kdaRecurrence launches the delta rule of version over seqs x heads blocks: for versions 6-8 and a head
// width kdaSplit takes, k_kda<version>_rD with kdaSplit's threads; else for a head width of 32, 64 or 128
// d threads of k_kda4_rD (versions 4 and up), k_kda3_rD (version 3) or k_kda_rD (version 2); else k_kda
// (version 1).
func (c *opCtx) kdaRecurrence(version int, out, qn, kn, dec, beta, v, starts uint64, seqs, heads, d int) error {
	if threads, ok := kdaSplit(version, d); ok {
		return c.launch(fmt.Sprintf("k_kda%d_r%d", version, d), d2(seqs, heads), d1(threads), 0,
			out, qn, kn, dec, beta, v, starts, int32(heads), c.b.bf)
	}
	switch d {
	case 32, 64, 128:
		name := fmt.Sprintf("k_kda_r%d", d)
		switch {
		case version >= 4:
			name = fmt.Sprintf("k_kda4_r%d", d)
		case version == 3:
			name = fmt.Sprintf("k_kda3_r%d", d)
		}
		return c.launch(name, d2(seqs, heads), d1(d), 0, out, qn, kn, dec, beta, v, starts, int32(heads), c.b.bf)
	}
	return c.launch("k_kda", d2(seqs, heads), d1(d), 4*(d*d+3*d), out, qn, kn, dec, beta, v, starts, int32(heads), int32(d), c.b.bf)
}

// kdaSplit is the block of kda.cu's kda_split for version and head width d (R threads a column, C
// columns a thread: R*d/C threads), and whether kda.cu has that kernel: version 6 (R 2, C 1), 7 (R 2,
// C 2) and 8 (R 4, C 4), each for widths 64 and 128. Other widths fall back to recurrence version 4
// (after k_kda_prep4, as version 5).
func kdaSplit(version, d int) (threads int, ok bool) {
	switch {
	case version == 6 && (d == 64 || d == 128):
		return 2 * d, true
	case (version == 7 || version == 8) && (d == 64 || d == 128):
		return d, true
	}
	return 0, false
}

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
