package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Expert is the CUDA backend's ops.Expert: one routed expert's three MXFP4 matrices kept packed in one
// device buffer (w1, w3, w2 packed bytes, then their scales), decoded by the matmul kernel as it stages
// each tile (k_matmul_mxfp4): 0.53 bytes a weight on the device instead of 2 for bfloat16.
type Expert struct {
	b           *Backend
	id          int
	latent, ffn int
	ptr         uint64
	off         [6]int // byte offsets of w1 packed, w1 scales, w3 packed, w3 scales, w2 packed, w2 scales
	freed       bool
	// ev, seq: an asynchronous upload's event on the copy stream and its place in the upload order
	// (stable.go); ev is 0 once the upload was waited for.
	ev  uintptr
	seq uint64
	// block: when not nil, the expert is a view into a device block shared with the other experts of a
	// batch copied in one piece (experts_upload.go); ptr is inside it, ev belongs to it.
	block *sharedBlock
}

// ID is the expert's index in its layer.
func (e *Expert) ID() int { return e.id }

// matrix returns expert matrix i (0: w1, 1: w3, 2: w2) as a matmul weight.
func (e *Expert) matrix(i int) weightRef {
	rows, cols := e.ffn, e.latent
	if i == 2 {
		rows, cols = e.latent, e.ffn
	}
	pw, sw := checkpoint.MXFP4RowBytes(cols)
	return weightRef{kernel: "k_matmul_mxfp4", tc: "k_matmul_tc_mxfp4", tcVec: "k_matmul_tc_mxfp4_vec", vecK: 32, ptr: e.ptr + uint64(e.off[2*i]), scales: e.ptr + uint64(e.off[2*i+1]),
		rows: rows, k: cols, packRow: pw, scRow: sw}
}

// layout places an expert's six parts in one device buffer, each at a 256-byte aligned offset (the matmul
// kernels read 16 bytes at a time): it sets e.off and returns the buffer's size and whether some part
// leaves padding (to be zeroed).
func (e *Expert) layout(parts [6][]byte) (size int, padded bool) {
	for i, part := range parts {
		e.off[i] = size
		size = (size + len(part) + 255) &^ 255
		padded = padded || len(part)%256 != 0
	}
	return size, padded
}

// UploadExpert copies expert id's MXFP4 matrices (K3_SPEC.md section 4) to the device packed: w1 and w3
// are ffn x latent, w2 is latent x ffn, each part at a 256-byte aligned offset of one buffer (the padding
// zeroed). The bytes are checked on the host: sizes, scale byte 255 (NaN) and, for the rare groups with
// scale 253 or 254, codes whose value overflows float32, each an error naming the matrix, as the CPU
// backend's decoder reports them. When all six parts lie in buffers from AllocHost the copies go straight
// from them on the copy stream and the checks run while the bytes are in flight (the expert is freed if
// one fails); otherwise the checks come first and the bytes go through the staging buffer.
func (b *Backend) UploadExpert(id, latent, ffn int, w1Packed, w1Scale, w3Packed, w3Scale, w2Packed, w2Scale []byte) (ops.Expert, error) {
	const op = "UploadExpert"
	if id < 0 || latent <= 0 || ffn <= 0 || latent%2 != 0 || ffn%2 != 0 {
		return nil, shapeErr(op, "expert %d: latent %d, ffn %d: want positive even sizes", id, latent, ffn)
	}
	parts := [6][]byte{w1Packed, w1Scale, w3Packed, w3Scale, w2Packed, w2Scale}
	e := &Expert{b: b, id: id, latent: latent, ffn: ffn}
	size, padded := e.layout(parts)
	direct := true
	for _, part := range parts {
		direct = direct && b.pinned(part)
	}
	check := func() error { return checkExpert(op, id, latent, ffn, parts) }
	// From stable memory (stable.go) the bytes never change: checked first, the copies are queued and not
	// waited for; the compute stream joins them before it uses or frees the expert.
	async := direct && b.stableHost(parts[:]...)
	if !direct || (async && !b.hosts.checkedBefore(parts)) {
		if err := check(); err != nil {
			return nil, err
		}
		if async {
			b.hosts.markChecked(parts)
		}
	}
	err := b.run(op, func(c *opCtx) error {
		p, err := b.dv.MallocCopy(size)
		if err != nil {
			return err
		}
		err = b.fillExpert(p, size, padded, direct, parts, e.off)
		if err != nil {
			// The copy stream is waited for first: the block was allocated on it and copies may be queued.
			return fmt.Errorf("%w (freeing: %v)", err, errors.Join(b.dv.SyncCopy(), b.dv.Free(p)))
		}
		if async {
			if err := b.recordUpload(e); err != nil {
				return fmt.Errorf("%w (freeing: %v)", err, errors.Join(b.dv.SyncCopy(), b.dv.Free(p)))
			}
		}
		e.ptr = p
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !direct || async {
		return e, nil
	}
	cerr := check() // while the copies run
	err = b.run(op, func(c *opCtx) error {
		err := b.dv.SyncCopy()
		if err != nil || cerr != nil {
			err = errors.Join(err, b.dv.Free(e.ptr))
			e.ptr, e.freed = 0, true
		}
		return err
	})
	if cerr != nil {
		if err != nil {
			return nil, errors.Join(cerr, err)
		}
		return nil, cerr
	}
	if err != nil {
		return nil, err
	}
	return e, nil
}

// fillExpert queues (direct: from pinned buffers, left in flight) or performs (staged) the copies of an
// expert's parts to device buffer p of size bytes, after zeroing it when some part leaves padding. On
// the CUDA thread.
func (b *Backend) fillExpert(p uint64, size int, padded, direct bool, parts [6][]byte, off [6]int) error {
	if padded { // size is a multiple of 256, so of 4
		d := b.drv
		if err := d.Check("cuMemsetD32Async(copy)", bind.Call(d.CuMemsetD32Async, uintptr(p), 0, uintptr(size/4), b.dv.CopyStream)); err != nil {
			return err
		}
	}
	for i, part := range parts {
		var err error
		if direct {
			err = b.dv.CopyAsync(p+uint64(off[i]), part)
		} else {
			err = b.dv.StageCopy(p+uint64(off[i]), part)
		}
		if err != nil {
			return err
		}
	}
	if !direct {
		return b.dv.SyncCopy() // the memset, when there was one
	}
	return nil
}

// checkExpert checks an expert's three matrices (w1, w3, w2) at once, one goroutine each, and returns the
// first failure in that order (what checking them one after another returns).
func checkExpert(op string, id, latent, ffn int, parts [6][]byte) error {
	mats := []struct {
		name       string
		rows, cols int
	}{{"w1", ffn, latent}, {"w3", ffn, latent}, {"w2", latent, ffn}}
	var errs [3]error
	var wg sync.WaitGroup
	for i, m := range mats {
		wg.Go(func() {
			if err := checkMXFP4(parts[2*i], parts[2*i+1], m.rows, m.cols); err != nil {
				errs[i] = fmt.Errorf("%w: %s: expert %d %s (%dx%d): %w", ErrArgument, op, id, m.name, m.rows, m.cols, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkMXFP4 validates one packed matrix without decoding it: byte counts, no scale 255, and for groups
// with scale >= 253 (where a large code overflows float32) the row is decoded to find an overflow.
func checkMXFP4(packed, scales []byte, rows, cols int) error {
	pw, sw := checkpoint.MXFP4RowBytes(cols)
	if len(packed) != rows*pw || len(scales) != rows*sw {
		return fmt.Errorf("%w: MXFP4 matrix %d x %d: got %d packed and %d scale bytes, want %d and %d",
			checkpoint.ErrArgument, rows, cols, len(packed), len(scales), rows*pw, rows*sw)
	}
	if !anyScaleAbove252(scales) { // the common case, eight bytes at a time
		return nil
	}
	var row []float32
	for r := range rows {
		for g, s := range scales[r*sw : (r+1)*sw] {
			if s < 253 {
				continue
			}
			if s == 255 {
				return fmt.Errorf("%w: row %d group %d: scale byte 255 is NaN", checkpoint.ErrMXFP4, r, g)
			}
			if row == nil {
				row = make([]float32, cols)
			}
			if err := checkpoint.DecodeMXFP4Row(row, packed[r*pw:(r+1)*pw], scales[r*sw:(r+1)*sw], r); err != nil {
				return err
			}
			break // the whole row was checked
		}
	}
	return nil
}

// anyScaleAbove252 reports whether some byte of s is 253, 254 or 255. Per byte b of a word, b >= 0xfd
// exactly when its top bit is set and (b & 0x7f) + 3 reaches 0x80; that sum is at most 0x82, so it never
// carries into the next byte.
func anyScaleAbove252(s []byte) bool {
	const low7, three, tops = 0x7f7f7f7f7f7f7f7f, 0x0303030303030303, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := binary.LittleEndian.Uint64(s[i:])
		if ((w&low7)+three)&w&tops != 0 {
			return true
		}
	}
	for ; i < len(s); i++ {
		if s[i] >= 253 {
			return true
		}
	}
	return false
}

// ExpertsAccumulate adds the weighted outputs of the given experts into acc (see ops.Backend), experts in
// ascending id. For expert e and the rows R that chose it:
//
//	zr = z[R]                                        // gathered
//	a = rounded(zr W1_e^T); c = rounded(zr W3_e^T)   // as MatMul
//	h = rounded(rounded(situ(a, c)) W2_e^T)          // SiTUGLU, MatMul
//	acc[R[i], :] += float32(weight_i * h[i, :])      // float32, never rounded, experts in ascending id
//
// In BF16 precision on the tensor cores (and latent, ffn multiples of 32) it runs grouped (experts.go,
// kernels/experts.cu): the rows gathered expert by expert, one launch for every expert's gate and up
// GEMMs with SiTU in the epilogue, one for the w2 GEMMs, one that adds each acc row's expert outputs in
// ascending id. Otherwise (FP32 precision, Options.NoTensorCores, other shapes) it runs expert after
// expert: k_gather, two matmuls, k_situ, a matmul, k_scatter_add. Both paths run each dot product as
// MatMul does on our kernels (the tensor-core k chunks of 16 ascending, or the CUDA-core loop) with the
// same rounding points and the same float32 accumulation order, so they give the same bits; each output
// row depends on its own z row only, so the result equals MatMul, MatMul, SiTUGLU, MatMul and the CPU
// backend's float32 accumulation (bit for bit on the CUDA cores), and calls on disjoint ascending expert
// subsets equal one call.
//
// Where cuBLASLt is in use and pins an algorithm for both expert shapes (2 ffn x latent and latent x
// ffn), the grouped path's GEMMs run on it instead (experts_lt.go): the same plan, decoded values and
// rounding points, each sum in the pinned algorithm's order (a choice by shape, never by rows), so the
// result is batch invariant as above; it may differ from the other paths at float32 rounding level
// (nothing promises cuBLASLt's order of the sums; on the H200 it came out bit-identical to theirs).
// Without cuBLASLt on an sm_90a device the GEMMs run on wgmma with the weights decoded in registers
// (kernels/experts_wg.cu, about twice the mma.sync kernels' rate and below cuBLASLt's path): the same
// plan with tiles of 256 rows, decoded values and rounding points, sums in fixed k steps of 16 (batch
// invariant; on the H200 bit-identical to the cuBLASLt path at K3's sizes).
func (b *Backend) ExpertsAccumulate(acc, z ops.Tensor, rt ops.Routing, experts []ops.Expert, beta, linBeta float32) error {
	return b.expertsAccumulate(acc, z, rt, experts, beta, linBeta, expertsAuto)
}

// expertsAccumulate is ExpertsAccumulate on the path mode picks (tests force one; expertsGrouped where
// groupedOK refuses is an error). It reads as the call's steps (experts_call.go): check the call and
// assign each expert its rows, choose the path, then run it on the CUDA thread.
func (b *Backend) expertsAccumulate(acc, z ops.Tensor, rt ops.Routing, experts []ops.Expert, beta, linBeta float32, mode expertsMode) error {
	const op = "ExpertsAccumulate"
	x, err := b.newExpertsCall(op, acc, z, rt, experts, beta, linBeta, mode)
	if err != nil {
		return err
	}
	grouped, kernels, err := b.expertsPath(op, x.latent, x.es, mode)
	if err != nil {
		return err
	}
	if grouped {
		return b.runGroupedExperts(op, x, kernels)
	}
	return b.runPerExpert(op, x)
}

// expert runs one expert over its n rows (device arrays idx: row ids, wts: routing weights) and adds the
// weighted outputs into acc (see ExpertsAccumulate).
func (c *opCtx) expert(e *Expert, acc, z uint64, latent, n int, idx, wts uint64, beta, linBeta float32) error {
	ffn := e.ffn
	zr, err := c.temp(4 * n * latent)
	if err != nil {
		return err
	}
	if err := c.launch1D("k_gather", n*latent, zr, z, dtF32, idx, int64(n), int32(latent)); err != nil {
		return err
	}
	gate, err := c.temp(4 * n * ffn)
	if err != nil {
		return err
	}
	up, err := c.temp(4 * n * ffn)
	if err != nil {
		return err
	}
	if err := c.gemm(gate, zr, n, e.matrix(0), true); err != nil {
		return err
	}
	if err := c.gemm(up, zr, n, e.matrix(1), true); err != nil {
		return err
	}
	if err := c.launch1D("k_situ", n*ffn, gate, gate, up, int64(n*ffn), beta, linBeta, c.b.bf); err != nil {
		return err
	}
	h, err := c.temp(4 * n * latent)
	if err != nil {
		return err
	}
	if err := c.gemm(h, gate, n, e.matrix(2), true); err != nil {
		return err
	}
	return c.launch1D("k_scatter_add", n*latent, acc, h, idx, wts, int64(n), int32(latent))
}
