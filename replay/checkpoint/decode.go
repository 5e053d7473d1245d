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

// MXFP4GroupSize is the number of consecutive columns of a row that share one E8M0 scale.
const MXFP4GroupSize = 32

// e2m1 are the values of the 4-bit E2M1 codes (OCP Microscaling spec; K3_SPEC section 4): 0..7 are
// 0, 0.5, 1, 1.5, 2, 3, 4, 6 and 8..15 their negatives (8 is -0).
var e2m1 = [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6,
	float32(math.Copysign(0, -1)), -0.5, -1, -1.5, -2, -3, -4, -6}

// MXFP4RowBytes returns the packed bytes (cols/2) and scale bytes (one per started group of 32 columns)
// of a row of logical width cols. K3's w1/w3 rows: 3584 columns -> 1792 and 112; w2: 3072 -> 1536 and 96.
func MXFP4RowBytes(cols int) (packed, scales int) {
	return cols / 2, (cols + MXFP4GroupSize - 1) / MXFP4GroupSize
}

// e8m0 returns 2^(s-127) as a float32, exactly: s in 1..254 is a normal float32 with that biased
// exponent, s = 0 is 2^-127, a float32 subnormal (bit 22 set). s = 255 (NaN) is refused by the callers.
func e8m0(s byte) float32 {
	if s == 0 {
		return math.Float32frombits(1 << 22)
	}
	return math.Float32frombits(uint32(s) << 23)
}

// DecodeMXFP4 decodes a rows x cols MXFP4 matrix into dst (rows*cols floats, row-major): packed holds
// rows*cols/2 bytes and scales rows*ceil(cols/32) bytes, as DecodeMXFP4Row describes per row.
func DecodeMXFP4(dst []float32, packed, scales []byte, rows, cols int) error {
	pw, sw := MXFP4RowBytes(cols)
	switch {
	case rows < 0 || cols < 0 || cols%2 != 0:
		return fmt.Errorf("%w: MXFP4 matrix %d x %d: want non-negative sizes and an even width", ErrArgument, rows, cols)
	case len(dst) != rows*cols || len(packed) != rows*pw || len(scales) != rows*sw:
		return fmt.Errorf("%w: MXFP4 matrix %d x %d: got %d floats, %d packed and %d scale bytes, want %d, %d and %d",
			ErrArgument, rows, cols, len(dst), len(packed), len(scales), rows*cols, rows*pw, rows*sw)
	}
	for r := range rows {
		if err := DecodeMXFP4Row(dst[r*cols:(r+1)*cols], packed[r*pw:(r+1)*pw], scales[r*sw:(r+1)*sw], r); err != nil {
			return err
		}
	}
	return nil
}

// DecodeMXFP4Row decodes one row of logical width len(dst) (even). It computes, for every column c:
//
//	b := packed[c/2]; code := b & 15 (c even) or b >> 4 (c odd)
//	dst[c] = e2m1[code] * 2^(scales[c/32] - 127)
//
// The product is exact in float32: an E2M1 value has at most two significant bits, and times a power of
// two in [2^-127, 2^125] it is representable (down to 2^-128, a subnormal). Scales 253 and 254 overflow
// float32 for the larger codes: such a value, and scale 255 (NaN in the OCP spec), is refused with an
// error wrapping ErrMXFP4 that names row (the caller's row number, for the message), group and column.
func DecodeMXFP4Row(dst []float32, packed, scales []byte, row int) error {
	cols := len(dst)
	pw, sw := MXFP4RowBytes(cols)
	if cols%2 != 0 || len(packed) != pw || len(scales) != sw {
		return fmt.Errorf("%w: MXFP4 row %d of width %d: got %d packed and %d scale bytes, want %d and %d (width even)",
			ErrArgument, row, cols, len(packed), len(scales), pw, sw)
	}
	for g, s := range scales {
		lo := g * MXFP4GroupSize
		hi := min(lo+MXFP4GroupSize, cols)
		if s == 255 {
			return fmt.Errorf("%w: row %d group %d (columns %d..%d): scale byte 255 is NaN", ErrMXFP4, row, g, lo, hi-1)
		}
		sc := e8m0(s)
		out := dst[lo:hi]
		in := packed[lo/2 : hi/2]
		for j, b := range in {
			out[2*j] = e2m1[b&15] * sc
			out[2*j+1] = e2m1[b>>4] * sc
		}
		if s >= 253 { // only here can a product leave float32's range
			for j, v := range out {
				if math.IsInf(float64(v), 0) {
					return fmt.Errorf("%w: row %d group %d column %d: scale 2^%d times code value %g overflows float32",
						ErrMXFP4, row, g, lo+j, int(s)-127, e2m1[codeAt(in, j)])
				}
			}
		}
	}
	return nil
}

// codeAt returns the 4-bit code of column j of a packed row.
func codeAt(packed []byte, j int) byte {
	if j%2 == 0 {
		return packed[j/2] & 15
	}
	return packed[j/2] >> 4
}
