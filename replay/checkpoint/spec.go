package checkpoint

import (
	"fmt"
	"strings"
)

// DType is a safetensors element type, spelled as in the file header ("BF16", "F32", "U8", ...).
type DType string

// The element types K3 checkpoints use. Others parse but no K3 tensor has them.
const (
	BF16 DType = "BF16"
	F32  DType = "F32"
	U8   DType = "U8"
)

// Spec is what the model expects of one tensor: its full checkpoint name, element type and shape.
// The layer plan of replay/model produces the list of Specs a config needs; the reader checks a model
// directory against it, and the synthetic writer writes exactly it.
type Spec struct {
	Name  string
	DType DType
	Shape []int64
}

// Bytes is the size of the tensor's data.
func (s Spec) Bytes() int64 {
	n := s.DType.Size()
	for _, d := range s.Shape {
		n *= d
	}
	return n
}

// String renders a spec as `name [7168 576] BF16`, the form error messages use.
func (s Spec) String() string { return fmt.Sprintf("%s %s %s", s.Name, ShapeString(s.Shape), s.DType) }

// ShapeString renders a shape as `[7168 576]`.
func ShapeString(shape []int64) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// Size is the number of bytes of one element, or 0 for a type this package does not know.
func (d DType) Size() int64 {
	switch d {
	case BF16, "F16", "I16", "U16":
		return 2
	case F32, "I32", "U32":
		return 4
	case "F64", "I64", "U64":
		return 8
	case U8, "I8", "BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0":
		return 1
	}
	return 0
}
