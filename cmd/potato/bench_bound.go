package main

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// The bound a bench divides its times by: the weights' bandwidth and the arithmetic rate, given by hand
// (--bound-bandwidth, --bound-flops) or measured here on the machine and backend being benched.

// bound is the measured ceilings the results are divided by.
type bound struct{ readBps, flops float64 }

// measureBound measures the weight bandwidth, when asked: with the host cache, the backend's uploads from
// its host memory (what a cached wave does); else reading every tensor of the checkpoint once (after the
// engine opened it the page cache may hold it, which is what a wave sees too). It times the backend's
// MatMul on a square problem of the model's width (arithmetic rate).
func measureBound(ctx context.Context, l *loaded, bandwidth, arithmetic, cached bool) (bound, error) {
	var bd bound
	if bandwidth {
		var err error
		if cached {
			bd.readBps, err = measureUpload(l)
		} else {
			bd.readBps, err = measureRead(ctx, l)
		}
		if err != nil {
			return bd, err
		}
	}
	if arithmetic {
		var err error
		if bd.flops, err = measureMatMul(l); err != nil {
			return bd, err
		}
	}
	return bd, nil
}

// measureReadCap bounds the bytes measureRead reads: enough for a steady rate, and a minute at most from a
// disk of 1 GB/s even when the checkpoint is K3's 1.56 TB.
const measureReadCap = 16 << 30

// measureRead reads the checkpoint's tensors in file order, up to measureReadCap bytes, in batches of
// about 1 GiB so that memory stays bounded for any model size.
func measureRead(ctx context.Context, l *loaded) (float64, error) {
	var reqs []checkpoint.ReadRequest
	var total, batch int64
	var elapsed time.Duration
	flush := func() error {
		start := time.Now()
		err := l.ckpt.ReadBatch(ctx, reqs)
		elapsed += time.Since(start)
		reqs, batch = nil, 0
		return err
	}
	for _, t := range l.ckpt.Tensors() {
		reqs = append(reqs, checkpoint.ReadRequest{Tensor: t, Dst: make([]byte, t.Size)})
		total += t.Size
		if batch += t.Size; batch >= 1<<30 {
			if err := flush(); err != nil {
				return 0, err
			}
		}
		if total >= measureReadCap {
			break
		}
	}
	if err := flush(); err != nil {
		return 0, err
	}
	return float64(total) / elapsed.Seconds(), nil
}

// measureMatMulFLOP is the least work measureMatMul times a call on a host backend: on a small model's
// width 256 rows are a few MFLOP, where the CPU backend's fan-out over its threads costs as much as the
// products (at the tiny preset's 128, 256 rows ran at 3 GFLOP/s and 16,384 at 12, while the layers reached
// 4-5: the bound sat below the waves).
const measureMatMulFLOP = 5e8

// measureMatMulDeviceFLOP is that work on a device backend (ops.DeviceMemory): 2 TFLOP, about 2.5 ms at
// an H200's 790 TFLOP/s and 19,464 rows at K3's width, long against a launch. At measureMatMulFLOP's 256
// rows of K3's width a GPU's product took microseconds and the timing was its download's, so a GPU's
// measured bound sat near a tenth of its rate and every bench had to give --bound-flops.
const measureMatMulDeviceFLOP = 2e12

// measureMatMul times the backend's MatMul on rows by the model's width squared, rows at least 256 and
// enough for measureMatMulFLOP (measureMatMulDeviceFLOP on a device), at most 65,536: its best of three,
// after a call that is not timed (a device backend may choose the shape's configuration on its first
// call: cuda/cublaslt_tune.go). A timed call ends with a one-row product downloaded, which a device
// backend finishes after every call queued before it, so that no large download is timed.
func measureMatMul(l *loaded) (float64, error) {
	b := l.engine.Model.Ops
	h := l.engine.Model.Dims.Hidden
	work := measureMatMulFLOP
	if _, dev := b.(ops.DeviceMemory); dev {
		work = measureMatMulDeviceFLOP
	}
	rows := max(256, min(65536, int(work/(2*float64(h)*float64(h)))+1))
	x, err := b.FromHost(rows, h, randomFloats(rows*h))
	if err != nil {
		return 0, err
	}
	defer b.Free(x)
	x1, err := b.FromHost(1, h, randomFloats(h))
	if err != nil {
		return 0, err
	}
	defer b.Free(x1)
	raw := make([]byte, 2*h*h)
	fillBF16(raw)
	w, err := b.Upload(ops.WeightBF16, h, h, raw)
	if err != nil {
		return 0, err
	}
	defer b.Free(w)
	product := func(in ops.Tensor, download bool) error {
		y, err := b.MatMul(in, w)
		if err != nil {
			return err
		}
		defer b.Free(y)
		if download {
			_, err = b.ToHost(y)
		}
		return err
	}
	call := func() error { // rows x h x h, finished
		if err := product(x, false); err != nil {
			return err
		}
		return product(x1, true)
	}
	if err := call(); err != nil {
		return 0, err
	}
	var best float64
	for range 3 {
		start := time.Now()
		if err := call(); err != nil {
			return 0, err
		}
		best = max(best, 2*float64(rows)*float64(h)*float64(h)/time.Since(start).Seconds())
	}
	return best, nil
}

// fillBF16 fills raw with arbitrary little-endian bfloat16 patterns of normal numbers between 2^-9 and
// 2^-1 in magnitude, of either sign. Never subnormal: a weight of subnormals (an exponent field of 0) took
// the CPU's products through its slow path, and the measured MatMul rate fell to a third of what the
// layers' own weights reach (3 GFLOP/s against 12 at the tiny preset).
func fillBF16(raw []byte) {
	for i := 0; i+1 < len(raw); i += 2 {
		v := i / 2
		raw[i] = byte(v*7 + 3)                      // the exponent's last bit and the mantissa
		raw[i+1] = byte(0x3b+v%4) | byte(v*13)&0x80 // the sign and the exponent's top seven bits: 118..125
	}
}

func randomFloats(n int) []float32 {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64())
	}
	return out
}

// measureUpload times the backend's upload of a 512 MiB bfloat16 weight from host memory, its own when
// it has some (the CUDA backend's pinned buffers, as the host cache holds them): the best of three.
func measureUpload(l *loaded) (float64, error) {
	b := l.engine.Model.Ops
	const rows, cols = 1 << 14, 1 << 14
	raw := make([]byte, 2*rows*cols)
	if mem, ok := b.(ops.HostMemory); ok {
		var err error
		if raw, err = mem.AllocHost(2 * rows * cols); err != nil {
			return 0, err
		}
		defer mem.FreeHost(raw)
	}
	fillBF16(raw)
	var best float64
	for range 3 {
		start := time.Now()
		w, err := b.Upload(ops.WeightBF16, rows, cols, raw[:2*rows*cols])
		if err != nil {
			return 0, err
		}
		best = max(best, float64(2*rows*cols)/time.Since(start).Seconds())
		b.Free(w)
	}
	return best, nil
}
