package cuda

import (
	"fmt"
	"math"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// ShortConvSiLU is KDA's causal depthwise convolution with SiLU per sequence of l (kda.cu: k_shortconv4 for 4
// taps and channels a multiple of 4, 4 channels of shortConvRows rows a thread; else k_shortconv, one
// thread per element, grid-stride):
//
//	out[t,c] = rounded(silu(sum_{i<K} float32(w[c,i] * x[t-K+1+i,c])))   // ascending i, rows before t's sequence skipped
//
// the CPU backend's statements, so the two agree bit for bit. The kernels round x as they load it, so a
// projection's deferred rounding (deferred.go) is done there.
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
		// In BF16 precision with the tensor cores the output is narrow-only (convNarrow), and a
		// projection's narrow-only output (matmul_narrow.go) is read from its bfloat16 copy; every other
		// x as float32, rounded as loaded (deferred.go)
		if b.convNarrow() && shortConv4Fits(out.ptr, 0, wp, xt.cols, wt.cols) {
			kernel, xp := "k_shortconv4b", xt.narrow
			if !narrowInput(xt) {
				kernel = "k_shortconv4n"
				if xp, err = c.raw(xt); err != nil {
					return err
				}
			}
			if xp%16 == 0 { // else (never for pool allocations) the float32 path below
				return c.keepNarrowOutput(out, func(op, nb uint64) error {
					return c.launch(kernel, shortConv4Grid(xt.rows, xt.cols), d1(ewThreads), 0,
						op, xp, wp, sp, int64(xt.rows), int32(xt.cols), b.bf, nb)
				})
			}
		}
		xp, err := c.raw(xt) // both kernels round x as they load it (deferred.go)
		if err != nil {
			return err
		}
		return c.shortConv(out.ptr, xp, wp, sp, xt.rows, xt.cols, wt.cols, b.bf)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// shortConvRows is the rows of one k_shortconv4 thread (kda.cu's SC_ROWS).
const shortConvRows = 4

// shortConv launches k_shortconv4 on rows x ch inputs with taps taps a channel, or k_shortconv where its
// shape does not fit (taps other than 4, ch not a multiple of 4, pointers not 16-byte aligned, more than
// 65,535 x 1,024 channels); both give the same bits.
func (c *opCtx) shortConv(out, x, w, start uint64, rows, ch, taps int, bf int32) error {
	if !shortConv4Fits(out, x, w, ch, taps) {
		return c.launch1D("k_shortconv", rows*ch, out, x, w, start, int64(rows), int32(ch), int32(taps), bf)
	}
	return c.launch("k_shortconv4", shortConv4Grid(rows, ch), d1(ewThreads), 0, out, x, w, start, int64(rows), int32(ch), bf)
}

// shortConv4Grid is k_shortconv4's grid over rows x ch inputs: a block of ewThreads channel quads for
// shortConvRows rows.
func shortConv4Grid(rows, ch int) dim3 {
	return d2((rows+shortConvRows-1)/shortConvRows, (ch/4+ewThreads-1)/ewThreads)
}

// convNarrow reports whether ShortConvSiLU writes its output narrow-only (cuda/narrow.go: the bfloat16
// copy alone): in BF16 precision where the chunked KDA kernel, its only reader in K3's layers, can run
// (tensor cores in use), since that kernel reads q, k and v from the copies (half the bytes of the
// float32 values, and the convolution writes half as many). Any other reader widens the copy first, so
// where the step kernels run instead the values are the same, one widening pass later.
func (b *Backend) convNarrow() bool {
	return b.bf == 1 && !b.opts.NoTensorCores && b.info.Major >= 8
}

// shortConv4Fits reports whether k_shortconv4 takes the shape: 4 taps, channels a multiple of 4 (at most
// 65,535 blocks of 256 quads), 16-byte aligned pointers.
func shortConv4Fits(out, x, w uint64, ch, taps int) bool {
	return taps == 4 && ch%4 == 0 && (out|x|w)%16 == 0 && ch/4 <= maxGridYZ*ewThreads
}

// KDA runs the gated delta rule per sequence and head with the CPU backend's loop:
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
// libm difference in exp and sigmoid): k_kda_prep_exact, then k_kda_exact_rD. In BF16 precision, at K3's
// head widths (64 and 128), k_kda_prep_fast evaluates dec's exp and sigmoid and beta's sigmoid in single
// precision (within a few float32 ulps of the double-precision values, TestKDAPrepFast) and
// k_kda_fast_rD runs the recurrence's three sums (ks, S += kn u, o) as fused multiply-adds, each product
// and sum rounded once instead of twice, split over two threads a column and added in a fixed order
// (kda.cu). So the values differ from the CPU backend's at float32 rounding level before the output's
// bfloat16 rounding, and an output sitting on a bfloat16 rounding boundary may move by one ulp (about
// 0.01-0.02% of them on the H200, TestKDAAgainstCPU and TestAgainstCPU). Each sum still runs in one fixed
// order (ascending i) per sequence and head and every prep value depends on its own row only, so a
// sequence's bits never depend on the wave in either precision.
//
// Launches (kdaPrep, kdaRecurrenceKernel): the prep over kdaPrepPairs(d) (row, head) pairs a block of 128 threads; the
// recurrence one block per (sequence, head) of d threads: k_kda_fast_rD for widths 64 and 128 in BF16
// precision, k_kda_exact_rD for widths 32, 64 and 128 otherwise (the state in registers), else
// k_kda_exact with (d*d + 3d) * 4 bytes of dynamic shared memory.
//
// In BF16 precision on the tensor cores (not Options.NoTensorCores, compute capability 8.0 or later) at
// head widths 64 and 128 and decay bounds down to kdaChunkLower, the chunked form runs instead of the
// two launches above (kernels/kda_chunk.cu, kdaChunkKernel): prep and recurrence in one kernel, chunks of
// kdaChunkRows rows anchored at each sequence's start, the three products with the state on the tensor
// cores with float32-accurate products (tf32 split in high and low parts). The same loop to float32
// rounding, in another order: the decay of a chunk as e^(sum of g) instead of a product of e^g, the
// chunk's rows solved as a triangular system; 0.03-0.05% of the outputs one bfloat16 ulp off the CPU
// backend on the H200 (TestKDAAgainstCPU, TestKDAChunkSlices), 21.2 ms against the step kernels' 31 at
// 16 x 4,096 tokens of 96 heads, 48.6 against 78 for one sequence of 65,536 (TestKDATiming, run 108).
func (b *Backend) KDA(q, k, v, graw, braw ops.Tensor, aLog, dtBias ops.Tensor, heads int, lower float32, l ops.Layout) (ops.Tensor, error) {
	out, _, err := b.kda(q, k, v, graw, braw, aLog, dtBias, heads, lower, l, nil, nil, false)
	return out, err
}

// narrowInput reports whether every one of ts is a narrow-only activation whose bfloat16 copy has rows of
// exactly its columns (narrow.go): the layout the chunked kernel's narrow form reads and catRows and
// copyRows copy as it is.
func narrowInput(ts ...*Tensor) bool {
	for _, t := range ts {
		if !t.narrowOnly || t.narrowLd != t.cols || t.dt != dtF32 {
			return false
		}
	}
	return true
}

// kdaChunkRows is the chunk of kda_chunk.cu (KC): a slice boundary inside a chunk hands on the rows since
// the chunk's start.
const kdaChunkRows = 16

// kdaChunkKernel is the chunked kernel for ch channels of head width d and decay bound lower on this
// backend, or "" where the step kernels run (FP32 precision, Options.NoTensorCores, a device before
// compute capability 8.0, other widths, a bound below kdaChunkLower, or rows so wide that a chunk's 16
// rows pass 2^31 values: kda_chunk.cu stages a chunk at 32-bit offsets from its first row).
func (b *Backend) kdaChunkKernel(ch, d int, lower float32) string {
	return kdaChunkKernelFor(b.bf == 1, !b.opts.NoTensorCores && b.info.Major >= 8, ch, d, lower)
}

// kdaChunkLower is the lowest decay bound the chunked kernel takes: it scales a chunk's rows by e^G and
// e^-G with G >= 16 lower, which stay normal floats for 16 * 5 = 80 (K3's bound is -5) and overflow
// past 87.
const kdaChunkLower = -5

// kdaChunkKernelFor is kdaChunkKernel for a precision (bf) and tensor cores (tc) in use.
func kdaChunkKernelFor(bf, tc bool, ch, d int, lower float32) string {
	if bf && tc && (d == 64 || d == 128) && lower >= kdaChunkLower && int64(ch)*kdaChunkRows <= math.MaxInt32 {
		return fmt.Sprintf("k_kda_chunk_r%d", d)
	}
	return ""
}

// launchKDAChunk launches a kernel of kda_chunk.cu (name: kdaChunkKernel's, or the clock-profile form
// with its buffer in extra) over seqs sequences of the layout whose row starts are at starts, heads heads
// of width d: in holds q, k, v, graw, braw, aLog and dtBias as float32, init and fin the state sequence 0
// starts from and the last sequence's state at its last chunk start (0: none), pre the npre carried rows
// of q, k, v, graw and braw (0: none).
func (c *opCtx) launchKDAChunk(name string, out uint64, in []uint64, starts uint64, seqs, heads, d int, lower, scale float32,
	init, fin uint64, pre [5]uint64, npre int, extra ...any) error {
	args := []any{out, in[0], in[1], in[2], in[3], in[4], in[5], in[6], starts, int32(heads), lower, scale, c.b.bf,
		init, fin, pre[0], pre[1], pre[2], pre[3], pre[4], int32(npre)}
	return c.launch(name, d2(seqs, heads), d1(2*d), kdaChunkSmem(d), append(args, extra...)...)
}

// kdaChunkSmem is kda_chunk.cu's kda_chunk_smem(d) in bytes (TestKDAChunkSmem compares the two).
func kdaChunkSmem(d int) int {
	const kc, ldt, ldp, lda = kdaChunkRows, 24, 40, 20
	return 4 * (4*kc*(d+8) + 2*kc*d + 2*d*ldt + kc*ldp + 2*kc*lda + 2*kc*d + 2*kc + 2*d)
}

// kda is KDA with, for token slices (slice.go), the state sequence 0 starts from (init, heads x d x d
// float32, nil: zero) and, with keepLast, the state after the last sequence's last row returned. With the
// chunked kernel, pre are the rows (q, k, v, graw, braw) of sequence 0 carried from the slice before, and
// init the state at their chunk's start; the state returned is the last sequence's at its last chunk
// start (the caller carries the rows after it).
func (b *Backend) kda(q, k, v, graw, braw ops.Tensor, aLog, dtBias ops.Tensor, heads int, lower float32, l ops.Layout,
	init *Tensor, pre []*Tensor, keepLast bool) (ops.Tensor, *Tensor, error) {
	const op = "KDA"
	ts, err := b.tensors(op, []string{"q", "k", "v", "graw", "braw", "aLog", "dtBias"}, q, k, v, graw, braw, aLog, dtBias)
	if err != nil {
		return nil, nil, err
	}
	qt := ts[0]
	if err := ops.CheckKDA(q, k, v, graw, braw, aLog, dtBias, heads, l); err != nil {
		return nil, nil, err
	}
	rows, ch := qt.rows, qt.cols
	d := ch / heads
	shmem := 4 * (d*d + 3*d)
	if d > 1024 || shmem > b.info.MaxSharedOptin {
		return nil, nil, shapeErr(op, "head width %d: the state needs %d bytes of shared memory, the device allows %d (and at most 1024 threads)",
			d, shmem, b.info.MaxSharedOptin)
	}
	scale := float32(1 / math.Sqrt(float64(d)))
	starts := make([]int32, len(l.Starts))
	for i, s := range l.Starts {
		starts[i] = int32(s)
	}
	if init != nil && (init.rows != heads*d || init.cols != d) {
		return nil, nil, shapeErr(op, "carried state %v: want %dx%d", init, heads*d, d)
	}
	chunk := b.kdaChunkKernel(ch, d, lower)
	npre := 0
	if len(pre) > 0 {
		npre = pre[0].rows
		for i, p := range pre {
			if want := ts[i].cols; chunk == "" || len(pre) != 5 || p.rows != npre || p.cols != want || npre >= kdaChunkRows {
				return nil, nil, shapeErr(op, "carried row tensor %d of %d: %v with kernel %q: want 5 tensors (q, k, v, graw, braw) of the same rows, at most %d, and %d columns",
					i, len(pre), p, chunk, kdaChunkRows-1, want)
			}
		}
	}
	// the chunked kernel's narrow form reads q, k and v (and their carried rows) from their bfloat16
	// copies where every one of them is narrow-only (ShortConvSiLU's outputs, convNarrow; the carried rows
	// copied from them, catRows), the same values in half the bytes, and writes its output narrow-only
	// (GatedRMSNorm, its reader in K3's layers, reads the copy: norm.go); else each input is widened (f32)
	narrow := chunk != "" && narrowInput(ts[:3]...)
	for _, p := range pre[:min(3, len(pre))] {
		narrow = narrow && (p.rows == 0 || narrowInput(p))
	}
	if narrow {
		chunk += "n"
	}
	var out, last *Tensor
	// the chunked kernel rounds graw and braw as it reads them (deferred.go); the other paths, and q, k
	// and v everywhere, read rounded values
	input := func(c *opCtx, i int, t *Tensor) (uint64, error) {
		if narrow && i < 3 {
			return t.narrow, nil
		}
		if chunk != "" && (i == 3 || i == 4) {
			return c.raw(t)
		}
		return c.f32(t)
	}
	err = b.run(op, func(c *opCtx) error {
		var err error
		in := make([]uint64, len(ts))
		for i, t := range ts {
			if in[i], err = input(c, i, t); err != nil {
				return err
			}
		}
		var initp, finp uint64
		if init != nil {
			if initp, err = c.f32(init); err != nil {
				return err
			}
		}
		if keepLast {
			if last, err = c.out(heads*d, d); err != nil {
				return err
			}
			finp = last.ptr
		}
		if out, err = c.out(rows, ch); err != nil || out.n() == 0 {
			return err
		}
		if chunk != "" {
			var pp [5]uint64
			for i, p := range pre {
				if p.rows > 0 {
					if pp[i], err = input(c, i, p); err != nil {
						return err
					}
				}
			}
			sp, err := uploadTemp(c, starts)
			if err != nil {
				return err
			}
			if narrow { // the narrow form writes its output as the bfloat16 copy alone (narrow-only)
				err := c.keepNarrow(out, ch, func(nb uint64) error {
					return c.launchKDAChunk(chunk, nb, in, sp, l.Sequences(), heads, d, lower, scale, initp, finp, pp, npre)
				})
				out.narrowOnly = err == nil
				return err
			}
			return c.launchKDAChunk(chunk, out.ptr, in, sp, l.Sequences(), heads, d, lower, scale, initp, finp, pp, npre)
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
		if err := c.kdaPrep(b.bf == 1, qn, kn, dec, beta, in, rows, heads, d, lower, scale); err != nil {
			return err
		}
		sp, err := uploadTemp(c, starts)
		if err != nil {
			return err
		}
		return c.kdaRecurrence(out.ptr, qn, kn, dec, beta, in[2], sp, l.Sequences(), heads, d, initp, finp)
	})
	if err != nil {
		return nil, nil, err
	}
	return out, last, nil
}

// kdaPrepPairs is the number of (row, head) pairs a block of the prep normalises: 16 (one warp sums the
// 32 rows of squares while the SM's other blocks compute), fewer for heads wider than 254 so that the
// staged rows stay within 32 KiB of shared memory.
func kdaPrepPairs(d int) int { return max(1, min(16, 4096/(d+2))) }

// kdaPrep launches k_kda_prep_fast (fast: BF16 precision) or k_kda_prep_exact over rows x heads pairs of
// head width d; in is KDA's inputs as float32 (q, k, v, graw, braw, aLog, dtBias).
func (c *opCtx) kdaPrep(fast bool, qn, kn, dec, beta uint64, in []uint64, rows, heads, d int, lower, scale float32) error {
	p, pairs := kdaPrepPairs(d), rows*heads
	if fast {
		return c.launch("k_kda_prep_fast", d1((pairs+p-1)/p), d1(128), 4*(2*p*(d+1)+4*p),
			qn, kn, dec, beta, in[0], in[1], in[3], in[4], in[5], in[6], int64(pairs), int32(heads), int32(d), int32(p), lower, scale)
	}
	return c.launch("k_kda_prep_exact", d1((pairs+p-1)/p), d1(128), 4*(2*p*(d+1)+3*p),
		qn, kn, dec, beta, in[0], in[1], in[3], in[4], in[5], in[6], int64(pairs), int32(heads), int32(d), int32(p), lower, scale)
}

// kdaRecurrence launches the delta rule over seqs x heads blocks, the kernel kdaRecurrenceKernel picks
// for the backend's precision and head width d.
// init, when not 0, is the state (heads x d x d float32) sequence 0 starts from; fin, when not 0, receives
// the last sequence's state after its last row (token slices, slice.go).
func (c *opCtx) kdaRecurrence(out, qn, kn, dec, beta, v, starts uint64, seqs, heads, d int, init, fin uint64) error {
	name, shmem := kdaRecurrenceKernel(c.b.bf == 1, d)
	if shmem == 0 {
		return c.launch(name, d2(seqs, heads), d1(d), 0, out, qn, kn, dec, beta, v, starts, int32(heads), c.b.bf, init, fin)
	}
	return c.launch(name, d2(seqs, heads), d1(d), shmem, out, qn, kn, dec, beta, v, starts, int32(heads), int32(d), c.b.bf, init, fin)
}

// kdaRecurrenceKernel is the recurrence kernel for head width d (d threads a block in each) and its
// dynamic shared memory: in BF16 precision (bf) k_kda_fast_rD for widths 64 and 128; else
// k_kda_exact_rD for widths 32, 64 and 128; else k_kda_exact, the state in shared memory.
func kdaRecurrenceKernel(bf bool, d int) (name string, shmem int) {
	switch {
	case bf && (d == 64 || d == 128):
		return fmt.Sprintf("k_kda_fast_r%d", d), 0
	case d == 32 || d == 64 || d == 128:
		return fmt.Sprintf("k_kda_exact_r%d", d), 0
	}
	return "k_kda_exact", 4 * (d*d + 3*d)
}
