package cuda

import (
	"errors"
	"fmt"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// The engine keeps the per-token state of slices that do not fit the device in host memory, and an
// expert-major layer's expert inputs too (replay/model/wave.go, moe_major.go): every slice of every layer
// crosses the bus both ways. Through ToHost and FromHost each value crossed as float32 and was widened
// or narrowed one at a time on the host: a 262,144-token sequence in 24 GB took 52.2 s a MoE layer that
// way, 14.0 s this way (docs/benchmarks.md, run 11). In BF16 precision the values are bfloat16 values, so
// they cross as their bits: half the bytes, the conversion a kernel on the device.
//
// Into and out of pinned memory (AllocHost, where the engine keeps them: replay/statebufs.go) the queued
// forms copy directly, with no staging, uploads on the compute stream and downloads on the state stream
// (state_download.go): the copy engine moves the buffer at the pinned rate (staged copies of a slice's
// state ran at 9-21 GB/s in run 40, against 55 pinned) and the host does not stand in the copy. A queued
// transfer still waits for the work queued before it, then queues its copy and returns without waiting
// for that (queuedWait below).
//
// queuedWait: not waiting at all let the host run ahead of the device by whole slices and expert calls:
// memory that ops queued but not yet run on the compute stream will free cannot serve allocations on the
// other streams (weights on the copy stream, the experts' lanes), and one 262,144-token sequence under
// --device-memory 24GB peaked at 26 GB of device memory (run 41) against 20 with waiting transfers.
// Waiting for the earlier work keeps what the device holds to what the plan counts, as the waiting
// transfers did, and keeps the pinned rate (run 42: 21.5 s, 20 GB); what it gives up is the host queueing
// the next slice's work while the device still runs this one's (it still does during the copy).

var _ ops.QueuedBF16Transfer = (*Backend)(nil)

// ToHostBF16 implements ops.BF16Transfer: the activation's values narrowed on the device (exact: they
// are bfloat16 values) and copied out, two bytes a value; a bfloat16 weight is copied as it is. Waits for
// the work queued before it.
func (b *Backend) ToHostBF16(x ops.Tensor, dst []uint16) error {
	return b.toHostBF16("ToHostBF16", x, dst, false)
}

// ToHostBF16Queued implements ops.QueuedBF16Transfer: ToHostBF16 into pinned memory queued on the state
// stream from a temporary narrow copy (state_download.go), else ToHostBF16.
func (b *Backend) ToHostBF16Queued(x ops.Tensor, dst []uint16) error {
	return b.toHostBF16("ToHostBF16Queued", x, dst, true)
}

// toHostBF16 is ToHostBF16, queued when queue is set and dst is pinned.
func (b *Backend) toHostBF16(op string, x ops.Tensor, dst []uint16, queue bool) error {
	t, err := b.tensor(op, "x", x)
	if err != nil {
		return err
	}
	if b.bf != 1 {
		return argErr(op, "needs BF16 precision (this backend is FP32)")
	}
	if len(dst) != t.n() {
		return shapeErr(op, "%dx%d needs %d values, got a buffer of %d", t.rows, t.cols, t.n(), len(dst))
	}
	queue = queue && t.n() > 0 && b.pinned(bytesOf(dst))
	return b.run(op, func(c *opCtx) error {
		if queue { // on the state stream: state_download.go
			if err := b.queuedWait(); err != nil {
				return err
			}
			return b.queueDownload(c, t, bytesOf(dst))
		}
		if t.n() == 0 {
			return nil
		}
		src, tmp, err := c.bf16Bits(t)
		if err == nil {
			err = download(b, dst, src)
		}
		return errors.Join(err, b.dv.Free(tmp))
	})
}

// bf16Bits says where t's bfloat16 bits are on the device: t itself when it is bfloat16, the copy a
// matmul made of it (narrow.go), else tmp, a new buffer they were narrowed into on the compute stream,
// which the caller frees (0 otherwise).
func (c *opCtx) bf16Bits(t *Tensor) (src, tmp uint64, err error) {
	switch {
	case t.dt == dtBF16:
		return t.ptr, 0, nil
	case t.narrow != 0 && t.narrowLd == t.cols:
		return t.narrow, 0, nil
	}
	if err := c.widen(t); err != nil { // never: a narrow-only tensor's copy serves above (narrow.go)
		return 0, 0, err
	}
	p, err := c.b.dv.Malloc(2 * t.n())
	if err != nil {
		return 0, 0, err
	}
	if err := c.toBF16(p, t.ptr, t.rows, t.cols, t.cols); err != nil {
		return 0, 0, errors.Join(err, c.b.dv.Free(p))
	}
	return p, p, nil
}

// FromHostBF16 implements ops.BF16Transfer: the bits copied in, two bytes a value, and widened on the
// device into a new activation (bfloat16 values are their own rounding, so this is FromHost's result).
func (b *Backend) FromHostBF16(rows, cols int, src []uint16) (ops.Tensor, error) {
	return b.fromHostBF16("FromHostBF16", rows, cols, src, false)
}

// FromHostBF16Queued implements ops.QueuedBF16Transfer: FromHostBF16 from pinned memory queued on the
// compute stream before the widening kernel, else FromHostBF16.
func (b *Backend) FromHostBF16Queued(rows, cols int, src []uint16) (ops.Tensor, error) {
	return b.fromHostBF16("FromHostBF16Queued", rows, cols, src, true)
}

// fromHostBF16 is FromHostBF16, queued when queue is set and src is pinned.
func (b *Backend) fromHostBF16(op string, rows, cols int, src []uint16, queue bool) (ops.Tensor, error) {
	if err := b.checkBF16Src(op, rows, cols, src); err != nil {
		return nil, err
	}
	queue = queue && len(src) > 0 && b.pinned(bytesOf(src))
	var out *Tensor
	err := b.run(op, func(c *opCtx) error {
		if queue { // see queuedWait, and state_download.go for the state stream
			if err := b.queuedWait(); err != nil {
				return err
			}
		}
		var err error
		if out, err = c.out(rows, cols); err != nil || out.n() == 0 {
			return err
		}
		p, err := b.dv.Malloc(2 * out.n())
		if err != nil {
			return err
		}
		if queue {
			err = b.dv.ToDeviceQueued(p, bytesOf(src))
		} else {
			err = b.dv.ToDevice(p, bytesOf(src))
		}
		if err == nil {
			err = c.launch1D("k_widen_bf16", out.n(), out.ptr, p, int64(out.n()))
		}
		if err != nil {
			return fmt.Errorf("%w (freeing: %v)", err, b.dv.Free(p))
		}
		return b.dv.Free(p)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// checkBF16Src checks an upload of bfloat16 bits src as a rows x cols activation, before any copy.
func (b *Backend) checkBF16Src(op string, rows, cols int, src []uint16) error {
	if err := checkDims(op, rows, cols); err != nil {
		return err
	}
	if b.bf != 1 {
		return argErr(op, "needs BF16 precision (this backend is FP32)")
	}
	if len(src) != rows*cols {
		return shapeErr(op, "%dx%d needs %d values, got %d", rows, cols, rows*cols, len(src))
	}
	return nil
}

// Sync implements ops.QueuedBF16Transfer: it waits for every op and copy queued on the compute stream
// and on the state stream (the downloads: state_download.go).
func (b *Backend) Sync() error {
	return b.run("Sync", func(c *opCtx) error { return b.queuedWait() })
}
