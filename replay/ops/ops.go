// Package ops is the backend interface: the coarse operations Kimi K3's forward pass is written against.
// Package model calls them; package cpu (pure Go, the reference) and package cuda implement them. Backends
// never import the model.
//
// Every activation is a 2-D tensor of rows (tokens) by columns. A wave concatenates the tokens of many
// sequences; a Layout says where each sequence's rows are, and only the ops that mix tokens (ShortConv,
// KDA, MLA) look at it. Every other op computes each row from that row alone, and every op fixes the order
// of its reductions, so a sequence's results do not depend on which other sequences share the wave
// (DESIGN.md, Numerics).
//
// Each method's doc comment states the plain loop it computes: that is the contract every backend meets.
// Rounding: in Precision BF16 the backend rounds to bfloat16 (round to nearest even) exactly where a method
// says "rounded"; in FP32 it rounds nowhere. Inputs that are activations are assumed already rounded.
package ops

import (
	"errors"
	"fmt"
)

// ErrOutOfMemory is matched (errors.Is) by a backend's error when an op could not get the device memory
// it needed; the backend stays usable, so the engine retries the wave as smaller waves.
var ErrOutOfMemory = errors.New("ops: out of device memory")

// Precision is how activations are rounded.
type Precision uint8

const (
	// BF16 rounds where the reference model rounds (K3_SPEC.md section 3).
	BF16 Precision = iota
	// FP32 keeps every activation in float32, for audits.
	FP32
)

func (p Precision) String() string {
	if p == FP32 {
		return "fp32"
	}
	return "bf16"
}

// ParsePrecision reads "bf16" or "fp32".
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "bf16":
		return BF16, nil
	case "fp32":
		return FP32, nil
	}
	return 0, fmt.Errorf("ops: precision %q: want bf16 or fp32", s)
}

// DType is the element type of weight bytes handed to Upload.
type DType uint8

// Weight element types.
const (
	WeightBF16 DType = iota // little-endian bfloat16
	WeightF32               // little-endian float32
)

// Tensor is a backend-owned 2-D array: Rows x Cols, row-major. Its storage type is the backend's business.
type Tensor interface {
	Rows() int
	Cols() int
}

// Layout places sequences in a wave: sequence s occupies rows Starts[s] .. Starts[s+1]-1, in order.
// len(Starts) is the number of sequences plus one; Starts[0] = 0 and the last entry is the row count.
type Layout struct {
	Starts []int
}

// Tokens is the number of rows the layout covers.
func (l Layout) Tokens() int {
	if len(l.Starts) == 0 {
		return 0
	}
	return l.Starts[len(l.Starts)-1]
}

// Sequences is the number of sequences in the layout.
func (l Layout) Sequences() int { return max(len(l.Starts)-1, 0) }

// Expert is one routed expert's three MXFP4 matrices, uploaded with UploadExpert.
type Expert interface {
	// ID is the expert's index in its layer.
	ID() int
}

// Routing is the router's choice for every row: K experts each, in selection order (descending by
// biased score, ties to the lower id), and their weights.
type Routing struct {
	K       int
	IDs     []int32   // rows x K
	Weights []float32 // rows x K: s_i / (sum of the chosen s_j + 1e-20) x scaling factor, fp32
	// index lists the rows by expert for AssignRows (Indexed; nil: AssignRows scans every row)
	index *expertIndex
}

// TokenStats are the next-token reductions of one row of logits, computed over the full vocabulary.
type TokenStats struct {
	Logprob float32 // log p(target); 0 when the row has no target
	Rank    int32   // 1 + the number of vocabulary entries with a strictly larger logit than the target; 0 without target
	Entropy float32 // nats, over the full vocabulary
	TopIDs  []int32 // the K most probable ids, by descending probability, ties to the lower id
	TopLogp []float32
}
