// Package bf16 is the bfloat16 number type: the top 16 bits of an IEEE float32.
//
// K3 stores most weights and activations in bfloat16. Widening to float32 is exact (append 16 zero bits);
// narrowing rounds to nearest, ties to even, which is what PyTorch's .to(torch.bfloat16) does, so that the
// engine's bf16 mode rounds exactly where and how the reference does. NaN stays NaN (quiet) on narrowing.
//
//	b := bf16.FromFloat32(1.00390625) // rounds to 1.0 (tie, even mantissa)
//	f := b.Float32()
package bf16

import "math"

// BF16 is one bfloat16 value, stored as its bit pattern.
type BF16 uint16

// FromFloat32 narrows f to bfloat16 with round-to-nearest-even.
func FromFloat32(f float32) BF16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN: keep the sign, force a quiet payload so it cannot round to Inf
		return BF16(u>>16 | 0x0040)
	}
	// Add 0x7fff plus the lowest kept bit: rounds half to even; overflow carries into the exponent,
	// which is the correct rounding of the largest finite values to Inf.
	u += 0x7fff + (u>>16)&1
	return BF16(u >> 16)
}

// Float32 widens b to float32 exactly.
func (b BF16) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }

// Round returns f rounded to the nearest bfloat16 value, as a float32.
func Round(f float32) float32 { return FromFloat32(f).Float32() }

// RoundSlice rounds every element of xs to bfloat16 in place.
func RoundSlice(xs []float32) {
	for i, x := range xs {
		xs[i] = Round(x)
	}
}

// Decode widens little-endian bfloat16 bytes into dst; len(src) must be 2*len(dst).
func Decode(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(src[2*i])<<16 | uint32(src[2*i+1])<<24)
	}
}

// Encode narrows src into little-endian bfloat16 bytes in dst; len(dst) must be 2*len(src).
func Encode(dst []byte, src []float32) {
	for i, x := range src {
		b := FromFloat32(x)
		dst[2*i] = byte(b)
		dst[2*i+1] = byte(b >> 8)
	}
}

// Bits writes the bfloat16 bits of src's values into dst (len(dst) >= len(src)) and reports whether every
// value is a bfloat16 value (its low 16 bits zero); it stops at the first that is not, dst then partly
// written. Exact: no value is rounded.
func Bits(dst []uint16, src []float32) bool {
	for i, x := range src {
		u := math.Float32bits(x)
		if u&0xffff != 0 {
			return false
		}
		dst[i] = uint16(u >> 16)
	}
	return true
}

// Widen writes the float32 values of the bfloat16 bits src into dst (len(dst) >= len(src)).
func Widen(dst []float32, src []uint16) {
	for i, b := range src {
		dst[i] = BF16(b).Float32()
	}
}
