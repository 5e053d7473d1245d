package checkpoint

import (
	"fmt"
	"math"
)

// The encoder exists for tests and for the synthetic checkpoint writer (replay/synth); the engine only
// decodes. It is the inverse of DecodeMXFP4Row for values that are representable, and a round-to-nearest
// quantizer for the rest.

// PackMXFP4Row packs one 4-bit E2M1 code per column (0..15) into packed: byte j holds column 2j in its
// low nibble and column 2j+1 in its high nibble. len(codes) must be even and len(packed) half of it.
func PackMXFP4Row(packed []byte, codes []byte) error {
	if len(codes)%2 != 0 || len(packed) != len(codes)/2 {
		return fmt.Errorf("%w: packing %d codes into %d bytes", ErrArgument, len(codes), len(packed))
	}
	for j := range packed {
		lo, hi := codes[2*j], codes[2*j+1]
		if lo > 15 || hi > 15 {
			return fmt.Errorf("%w: E2M1 code %d or %d at column %d is not 4 bits", ErrArgument, lo, hi, 2*j)
		}
		packed[j] = lo | hi<<4
	}
	return nil
}

// E2M1Code returns the E2M1 code nearest to v: ties go to the even code (the one whose mantissa bit is
// 0, as IEEE round-to-nearest-even does), magnitudes past 6 saturate to 6, and the sign is kept, so
// values that round to zero from below give code 8 (-0).
func E2M1Code(v float64) byte {
	var sign byte
	if math.Signbit(v) {
		sign, v = 8, -v
	}
	// Midpoints between neighbouring magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; at a tie the even code wins.
	var c byte
	switch {
	case v <= 0.25:
		c = 0
	case v < 0.75:
		c = 1
	case v <= 1.25:
		c = 2
	case v < 1.75:
		c = 3
	case v <= 2.5:
		c = 4
	case v < 3.5:
		c = 5
	case v <= 5:
		c = 6
	default:
		c = 7
	}
	return sign | c
}

// QuantizeMXFP4Row rounds each column of src to the nearest code under its group's given scale
// (scales[c/32] is an E8M0 byte, 0..254) and packs the codes into packed. NaN and Inf are refused.
func QuantizeMXFP4Row(packed []byte, src []float32, scales []byte) error {
	pw, sw := MXFP4RowBytes(len(src))
	if len(src)%2 != 0 || len(packed) != pw || len(scales) != sw {
		return fmt.Errorf("%w: MXFP4 row of width %d: got %d packed and %d scale bytes, want %d and %d (width even)",
			ErrArgument, len(src), len(packed), len(scales), pw, sw)
	}
	for c := 0; c < len(src); c += 2 {
		var code [2]byte
		for k := range 2 {
			x := float64(src[c+k])
			s := scales[(c+k)/MXFP4GroupSize]
			if s == 255 || math.IsNaN(x) || math.IsInf(x, 0) {
				return fmt.Errorf("%w: column %d: cannot quantize %g with scale byte %d", ErrMXFP4, c+k, x, s)
			}
			code[k] = E2M1Code(math.Ldexp(x, 127-int(s))) // x / 2^(s-127), exact in float64
		}
		packed[c/2] = code[0] | code[1]<<4
	}
	return nil
}

// EncodeMXFP4Row chooses each group's scale as the OCP MX spec does (2 to the power of the exponent of
// the group's largest magnitude, minus 2, E2M1's largest exponent; clamped to E8M0's range) and
// quantizes src with it. A group whose values are all E2M1 values times one power of two 2^k (with
// -127 <= k <= 125) decodes back exactly; an all-zero group gets scale 2^0.
func EncodeMXFP4Row(packed, scales []byte, src []float32) error {
	_, sw := MXFP4RowBytes(len(src))
	if len(scales) != sw {
		return fmt.Errorf("%w: MXFP4 row of width %d: got %d scale bytes, want %d", ErrArgument, len(src), len(scales), sw)
	}
	for g := range scales {
		group := src[g*MXFP4GroupSize : min((g+1)*MXFP4GroupSize, len(src))]
		var amax float64
		for _, x := range group {
			amax = max(amax, math.Abs(float64(x))) // max propagates NaN; Quantize refuses it
		}
		s := 127
		if amax > 0 && !math.IsInf(amax, 0) && !math.IsNaN(amax) {
			_, exp := math.Frexp(amax) // amax = f * 2^exp, f in [0.5, 1): floor(log2 amax) = exp-1
			s = min(max(exp-1-2+127, 0), 254)
		}
		scales[g] = byte(s)
	}
	return QuantizeMXFP4Row(packed, src, scales)
}

// EncodeMXFP4 encodes a rows x cols float32 matrix (row-major) row by row with EncodeMXFP4Row into packed
// (rows*cols/2 bytes) and scales (rows*ceil(cols/32) bytes).
func EncodeMXFP4(packed, scales []byte, src []float32, rows, cols int) error {
	pw, sw := MXFP4RowBytes(cols)
	if rows < 0 || cols < 0 || cols%2 != 0 || len(src) != rows*cols || len(packed) != rows*pw || len(scales) != rows*sw {
		return fmt.Errorf("%w: MXFP4 matrix %d x %d: got %d floats, %d packed and %d scale bytes, want %d, %d and %d",
			ErrArgument, rows, cols, len(src), len(packed), len(scales), rows*cols, rows*pw, rows*sw)
	}
	for r := range rows {
		if err := EncodeMXFP4Row(packed[r*pw:(r+1)*pw], scales[r*sw:(r+1)*sw], src[r*cols:(r+1)*cols]); err != nil {
			return fmt.Errorf("row %d: %w", r, err)
		}
	}
	return nil
}
