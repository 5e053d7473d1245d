package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/potato-k3/potato-k3/replay/bf16"
)

// DecodeBF16 widens little-endian bfloat16 bytes into dst exactly; len(src) must be 2*len(dst).
func DecodeBF16(dst []float32, src []byte) error {
	if len(src) != 2*len(dst) {
		return fmt.Errorf("%w: BF16 decode of %d bytes into %d floats, want %d bytes", ErrArgument,
			len(src), len(dst), 2*len(dst))
	}
	bf16.Decode(dst, src)
	return nil
}

// DecodeF32 copies little-endian float32 bytes into dst; len(src) must be 4*len(dst).
func DecodeF32(dst []float32, src []byte) error {
	if len(src) != 4*len(dst) {
		return fmt.Errorf("%w: F32 decode of %d bytes into %d floats, want %d bytes", ErrArgument,
			len(src), len(dst), 4*len(dst))
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
	return nil
}

// Decode widens src, of the given dtype (BF16 or F32, the float types of K3's unquantized tensors), into
// dst. MXFP4 tensors are two U8 tensors and decode with DecodeMXFP4.
func Decode(dst []float32, dtype DType, src []byte) error {
	switch dtype {
	case BF16:
		return DecodeBF16(dst, src)
	case F32:
		return DecodeF32(dst, src)
	}
	return fmt.Errorf("%w: no float32 decoding for dtype %s", ErrArgument, dtype)
}
