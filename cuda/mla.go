package cuda

import (
	"fmt"
	"math"

	"github.com/potato-k3/potato-k3/cuda/bind"

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
// On an sm_90a device version 2's statement runs on wgmma (mla_wg.cu, two 64-row tiles a block;
// Options.MLAMmaSync keeps mla_tc.cu's mma.sync kernel): the same blocks, order and split, and the same
// bits.
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
	return b.mla(ts, heads, nope, shared, vdim, l, 0, nil, nil)
}

// keyPart is the part of sequence 0's keys one launch of MLA's kernel walks when a slice continuing a
// long sequence takes that sequence's earlier keys a chunk at a time (slice_mla.go): ts[1] and ts[2] hold key
// rows base.. of the layout, the tiles of sequence 0 walk keys lo .. hi-1 (hi < 0: to the end, and the
// launch writes the output), and their softmax state waits in st between the launches. Parts before the
// last launch only sequence 0's tiles and write no output.
type keyPart struct {
	base, lo, hi int
	st           *Tensor
}

// last reports whether the part ends the keys (the launch writes the output).
func (p *keyPart) last() bool { return p == nil || p.hi < 0 }

// stateArgs are the kernel arguments klo, khi, st, st0 of a launch (st = 0: keys whole).
func (p *keyPart) stateArgs(low int) []any {
	if p == nil {
		return []any{int64(0), int64(-1), uint64(0), int64(0)}
	}
	return []any{int64(p.lo), int64(p.hi), p.st.ptr, int64(low)}
}

// tiles keeps the query tiles (tasks of sequence start, t0, t1) a launch runs, with the first row any
// of them reads: those holding a row from qOff on (tilesFrom), and for a part before the last only those
// of the sequence at row 0.
func (p *keyPart) tiles(tasks []int32, qOff int) ([]int32, int) {
	tasks, low := tilesFrom(tasks, qOff)
	if p.last() {
		return tasks, low
	}
	var kept []int32
	for i := 0; i < len(tasks); i += 3 {
		if tasks[i] == 0 {
			kept = append(kept, tasks[i:i+3]...)
		}
	}
	return kept, low
}

// rebase returns the address a kernel indexes by key row for a buffer of key rows from the part's base
// on, rowBytes a row (the buffer itself without a part: its rows are the layout's).
func (p *keyPart) rebase(ptr uint64, rowBytes int) uint64 {
	if p == nil {
		return ptr
	}
	return ptr - uint64(p.base*rowBytes)
}

// mlaLaunch is what the launches of both MLA kernels share (mlaBegin), on the CUDA thread.
type mlaLaunch struct {
	in     []uint64 // q, kv and ks as float32
	out    *Tensor  // nil for a key part before the last, which writes no output
	tasks  uint64   // the query tiles on the device
	q, o   uint64   // the query and output addresses the kernel indexes by key row (mlaQueries)
	finish func() error
}

// mlaBegin reads the inputs as float32, makes the output (unless part is before the last) and, when some
// tile runs (run), uploads the tiles and places the queries and output. tc: for the tensor-core kernels,
// which round q, kv and ks as they load them (so a deferred rounding stays deferred, deferred.go) and
// mask the query rows before qOff themselves (no padded copies, mlaQueries).
func (c *opCtx) mlaBegin(ts []*Tensor, tasks []int32, ocols, qOff, low int, part *keyPart, tc bool) (m mlaLaunch, run bool, err error) {
	in := c.f32All
	if tc {
		in = c.rawAll
	}
	if m.in, err = in(ts); err != nil {
		return m, false, err
	}
	if part.last() {
		if m.out, err = c.out(ts[0].rows, ocols); err != nil {
			return m, false, err
		}
	}
	if len(tasks) == 0 {
		return m, false, nil
	}
	if m.tasks, err = uploadTemp(c, tasks); err != nil {
		return m, false, err
	}
	m.q, m.o, m.finish, err = c.mlaQueries(ts[0], m.out, ocols, qOff, low, tc)
	return m, err == nil, err
}

// result is the op's output: none (a nil interface, not a nil *Tensor) for a key part before the last.
func (m *mlaLaunch) result() ops.Tensor {
	if m.out == nil {
		return nil
	}
	return m.out
}

// mlaPartFloats is the float32 state MLA's kernel for these head sizes keeps between the key parts of
// the tiles of sequence 0 of l from query row qOff on: per 64-row tile and head, the tensor-core kernels'
// 128 threads' o, m and l (vp / 8 x 4 + 4 floats each; the wgmma kernel's tiles start at its 128-row
// block tile), or version 1's accumulator, maxima and sums of its 16 rows.
func (b *Backend) mlaPartFloats(heads, nope, shared, vdim int, l ops.Layout, qOff int) int {
	first := qOff
	if l.Sequences() > 0 {
		first = l.Starts[1]
	}
	if tc, ok := b.mlaTCKernel(nope+shared, vdim); ok {
		// 64-row tiles from the first of the block tile that holds qOff (the state's row st0)
		tiles := (first+mlaTCTile-1)/mlaTCTile - qOff/tc.tileRows()*(tc.tileRows()/mlaTCTile)
		return tiles * heads * mlaTCThreads * (tc.vp/8*4 + 4)
	}
	tiles := (first+mlaQB-1)/mlaQB - qOff/mlaQB
	return tiles * heads * (mlaQB*vdim + 2*mlaQB)
}

// mla runs MLA's kernel for the precision and head sizes. l is a layout over the key rows (ts[1], ts[2]);
// the query rows ts[0] are the key rows from qOff on (qOff > 0: the rows before are an earlier slice's
// keys of sequence 0, slice.go), and so are the output's. Only query tiles holding a row from qOff on run;
// the tile holding row qOff runs whole, its rows before qOff on zero queries into a scratch output.
//
// The tensor-core kernels also take ts = q, kv, ks, kv2, ks2: the key rows of kv then those of kv2 (a
// slice's own keys after the carried prefix's, slice_mla.go), read where they are. With kvb (kv_b_proj's
// weight) not nil, kv and kv2 are latents, whose keys the op expands itself (mla_latent.go).
func (b *Backend) mla(ts []*Tensor, heads, nope, shared, vdim int, l ops.Layout, qOff int, part *keyPart, kvb *Tensor) (ops.Tensor, error) {
	if tc, ok := b.mlaTCKernel(nope+shared, vdim); ok {
		if len(ts) == 5 && (ts[3].cols != ts[1].cols || ts[4].cols != ts[2].cols || ts[3].rows != ts[4].rows || ts[1].rows != ts[2].rows) {
			return nil, shapeErr("MLA", "keys in two parts: %v and %v, shared keys %v and %v", ts[1], ts[3], ts[2], ts[4])
		}
		return b.mlaTC(tc, ts, heads, nope, shared, vdim, l, qOff, part, kvb)
	}
	if len(ts) != 3 || kvb != nil {
		return nil, fmt.Errorf("%w: MLA on the CUDA cores takes its keys expanded, in one tensor, got %d inputs", ErrInternal, len(ts))
	}
	return b.mlaCUDACores(ts, heads, nope, shared, vdim, l, qOff, part)
}

// mlaTCKernel returns the tensor-core kernel MLA runs for these head sizes, if it runs one: mla_wg.cu's
// (wgmma) on an sm_90a device unless Options.MLAMmaSync, else mla_tc.cu's (mma.sync).
func (b *Backend) mlaTCKernel(qk, vdim int) (mlaTCKernel, bool) {
	if b.bf == 1 && !b.opts.NoTensorCores {
		return mlaTCFor(qk, vdim, b.wgOK() && !b.opts.MLAMmaSync)
	}
	return mlaTCKernel{}, false
}

// tilesFrom keeps the tasks (sequence start, t0, t1) whose tile ends after row qOff and returns them with
// the first row any of them reads (the lowest t0).
func tilesFrom(tasks []int32, qOff int) ([]int32, int) {
	if qOff == 0 {
		return tasks, 0
	}
	kept, low := tasks[:0:0], qOff
	for i := 0; i < len(tasks); i += 3 {
		if int(tasks[i+2]) > qOff {
			kept = append(kept, tasks[i:i+3]...)
			low = min(low, int(tasks[i+1]))
		}
	}
	return kept, low
}

// mlaQueries returns the query and output device addresses a kernel indexes by key row, for query rows
// qt from row qOff on whose tiles start at row low <= qOff: when low < qOff and the kernel does not mask
// the rows before qOff itself (masked: the tensor-core kernel's qlo), q gets qOff - low zero rows before
// it (a temporary) and the output a scratch of as many rows, copied into out after the kernel. With out
// nil (a key part before the last, which writes no output) only q is placed.
func (c *opCtx) mlaQueries(qt *Tensor, out *Tensor, ocols, qOff, low int, masked bool) (qp, op uint64, finish func() error, err error) {
	qcols, pad, d := qt.cols, qOff-low, c.b.drv
	if masked {
		low, pad = qOff, 0 // rows before qOff are never read or written
	}
	qbase := qt.ptr
	finish = func() error { return nil }
	if pad > 0 {
		if qbase, err = c.temp(4 * (pad + qt.rows) * qcols); err != nil {
			return 0, 0, nil, err
		}
		if err = d.Check("cuMemsetD32Async", bind.Call(d.CuMemsetD32Async, uintptr(qbase), 0, uintptr(pad*qcols), c.stream())); err != nil {
			return 0, 0, nil, err
		}
		if err = d.Check("cuMemcpyDtoDAsync", bind.Call(d.CuMemcpyDtoDAsync, uintptr(qbase+uint64(4*pad*qcols)), uintptr(qt.ptr),
			uintptr(4*qt.rows*qcols), c.stream())); err != nil {
			return 0, 0, nil, err
		}
	}
	// the kernels index q and out by key row; rows from low on are inside the buffers
	qp = qbase - uint64(4*low*qcols)
	if out == nil { // a key part before the last: its tiles save their state instead of an output
		return qp, 0, finish, nil
	}
	obase := out.ptr
	if pad > 0 {
		if obase, err = c.temp(4 * (pad + qt.rows) * ocols); err != nil {
			return 0, 0, nil, err
		}
		finish = func() error {
			return d.Check("cuMemcpyDtoDAsync", bind.Call(d.CuMemcpyDtoDAsync, uintptr(out.ptr), uintptr(obase+uint64(4*pad*ocols)),
				uintptr(4*qt.rows*ocols), c.stream()))
		}
	}
	return qp, obase - uint64(4*low*ocols), finish, nil
}

// mlaCUDACores launches version 1.
func (b *Backend) mlaCUDACores(ts []*Tensor, heads, nope, shared, vdim int, l ops.Layout, qOff int, part *keyPart) (ops.Tensor, error) {
	const op = "MLA"
	qk := nope + shared
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
	tasks, low := part.tiles(tasks, qOff)
	div := float32(math.Sqrt(float64(qk)))
	var m mlaLaunch
	err := b.run(op, func(c *opCtx) error {
		var run bool
		var err error
		if m, run, err = c.mlaBegin(ts, tasks, heads*vdim, qOff, low, part, false); !run {
			return err
		}
		kv, ks := part.rebase(m.in[1], 4*ts[1].cols), part.rebase(m.in[2], 4*ts[2].cols)
		args := append([]any{m.o, m.q, kv, ks, m.tasks, int32(heads), int32(nope), int32(shared), int32(vdim), div, b.bf}, part.stateArgs(low)...)
		if err := c.launch("k_mla", d2(len(tasks)/3, heads), d1(mlaThreads), shmem, args...); err != nil {
			return err
		}
		return m.finish()
	})
	if err != nil {
		return nil, err
	}
	return m.result(), nil
}
