package model

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Source hands the model the raw little-endian bytes of a checkpoint tensor. The engine's implementation
// reads the model directory (and prefetches); tests use in-memory maps. The model never keeps the slice.
type Source interface {
	Read(ctx context.Context, s checkpoint.Spec) ([]byte, error)
}

// ExpertSource hands the model routed experts of an MoE layer, uploaded to its backend, only once the
// router has chosen them. The engine counts the bytes it reads for them.
type ExpertSource interface {
	// Experts returns experts ids (ascending) of layer `layer`, in the same order.
	Experts(ctx context.Context, layer int, ids []int) ([]ops.Expert, error)
}

// loader binds checkpoint tensors by name and uploads them, collecting the first error with the tensor
// named, so a layer's weight struct is never left with a silent hole.
type loader struct {
	ctx context.Context
	b   ops.Backend
	src Source
	err error
}

// bytes reads s, checking the byte count.
func (ld *loader) bytes(s checkpoint.Spec) []byte {
	if ld.err != nil {
		return nil
	}
	raw, err := ld.src.Read(ld.ctx, s)
	var re *checkpoint.ReadError
	switch {
	case errors.As(err, &re): // it names the file and the tensor whose read failed, which may be another
		ld.err = err // tensor of the layer read ahead with s: prefixing s would point at the wrong one
		return nil
	case err != nil:
		ld.err = fmt.Errorf("tensor %s: %w", s.Name, err)
		return nil
	}
	if int64(len(raw)) != s.Bytes() {
		ld.err = fmt.Errorf("tensor %s: read %d bytes, want %d for %s", s.Name, len(raw), s.Bytes(), s)
		return nil
	}
	if _, checked := ld.src.(Prechecked); !checked {
		if err := CheckFinite(s.DType, raw); err != nil {
			ld.err = fmt.Errorf("tensor %s: %w", s.Name, err)
			return nil
		}
	}
	return raw
}

// tensor uploads s as a 2-D tensor: the first dimension is the rows, the rest flattened into columns
// (a 1-D weight becomes one row; a conv weight [C,1,K] becomes C x K).
func (ld *loader) tensor(s checkpoint.Spec) ops.Tensor {
	raw := ld.bytes(s)
	if ld.err != nil {
		return nil
	}
	rows, cols := int64(1), int64(1)
	if len(s.Shape) == 1 {
		cols = s.Shape[0]
	} else {
		rows = s.Shape[0]
		for _, d := range s.Shape[1:] {
			cols *= d
		}
	}
	var dt ops.DType
	switch s.DType {
	case checkpoint.BF16:
		dt = ops.WeightBF16
	case checkpoint.F32:
		dt = ops.WeightF32
	default:
		ld.err = fmt.Errorf("tensor %s: dtype %s cannot be uploaded as a dense weight", s.Name, s.DType)
		return nil
	}
	t, err := ld.b.Upload(dt, int(rows), int(cols), raw)
	if err != nil {
		ld.err = fmt.Errorf("tensor %s: %w", s.Name, err)
		return nil
	}
	return t
}

// floats decodes s to float32 on the host (for weights folded before upload).
func (ld *loader) floats(s checkpoint.Spec) []float32 {
	raw := ld.bytes(s)
	if ld.err != nil {
		return nil
	}
	n := int(s.Bytes() / s.DType.Size())
	out := make([]float32, n)
	switch s.DType {
	case checkpoint.BF16:
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
		}
	case checkpoint.F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	default:
		ld.err = fmt.Errorf("tensor %s: dtype %s is not a float type", s.Name, s.DType)
		return nil
	}
	return out
}

// foldedMix uploads gamma*w, the AttnRes score vector of one site, folded once in float32
// (K3_SPEC.md 5.1: score = sum_d gamma_d w_d v_d / rms(v)).
func (ld *loader) foldedMix(norm, proj checkpoint.Spec) ops.Tensor {
	gamma, w := ld.floats(norm), ld.floats(proj)
	if ld.err != nil {
		return nil
	}
	raw := make([]byte, 4*len(gamma))
	for d := range gamma {
		binary.LittleEndian.PutUint32(raw[4*d:], math.Float32bits(gamma[d]*w[d]))
	}
	t, err := ld.b.Upload(ops.WeightF32, 1, len(gamma), raw)
	if err != nil {
		ld.err = fmt.Errorf("AttnRes mix %s: %w", norm.Name, err)
		return nil
	}
	return t
}
