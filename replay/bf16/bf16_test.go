package bf16

import (
	"math"
	"testing"
)

func TestFromFloat32(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		want uint16
	}{
		{"one", 1, 0x3f80},
		{"tie rounds to even (down)", math.Float32frombits(0x3f808000), 0x3f80},
		{"tie rounds to even (up)", math.Float32frombits(0x3f818000), 0x3f82},
		{"above tie rounds up", math.Float32frombits(0x3f808001), 0x3f81},
		{"below tie rounds down", math.Float32frombits(0x3f807fff), 0x3f80},
		{"negative", -2.5, 0xc020},
		{"max finite rounds to inf", math.MaxFloat32, 0x7f80},
		{"inf", float32(math.Inf(1)), 0x7f80},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"subnormal", math.Float32frombits(0x00010000), 0x0001},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := FromFloat32(tc.in); uint16(got) != tc.want {
				t.Errorf("FromFloat32(%v) = %#04x, want %#04x", tc.in, uint16(got), tc.want)
			}
		})
	}
}

func TestNaNStaysNaN(t *testing.T) {
	for _, bits := range []uint32{0x7fc00000, 0x7f800001, 0xffffffff, 0x7fffffff} {
		f := math.Float32frombits(bits)
		if g := FromFloat32(f).Float32(); !math.IsNaN(float64(g)) {
			t.Errorf("NaN %#08x narrowed to %v", bits, g)
		}
	}
}

// TestRoundMatchesFloat64Nearest checks narrowing against an independent definition: the nearest of the two
// neighbouring bf16 values computed in float64, ties to the even bit pattern.
func TestRoundMatchesFloat64Nearest(t *testing.T) {
	for u := uint32(0); u < 0x7f000000; u += 0x00012345 {
		f := math.Float32frombits(u)
		lo := math.Float32frombits(u &^ 0xffff)
		hi := math.Float32frombits((u &^ 0xffff) + 0x10000)
		dl, dh := float64(f)-float64(lo), float64(hi)-float64(f)
		want := lo
		if dh < dl || (dh == dl && (u>>16)&1 == 1) {
			want = hi
		}
		if got := Round(f); got != want {
			t.Fatalf("Round(%g [%#08x]) = %g, want %g", f, u, got, want)
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	src := []float32{0, 1, -1, 3.140625, 65280, -0.0078125}
	buf := make([]byte, 2*len(src))
	Encode(buf, src)
	got := make([]float32, len(src))
	Decode(got, buf)
	for i := range src {
		if got[i] != src[i] {
			t.Errorf("element %d: got %v, want %v", i, got[i], src[i])
		}
	}
	if buf[2] != 0x80 || buf[3] != 0x3f { // 1.0 little-endian
		t.Errorf("1.0 encoded as % x, want 80 3f", buf[2:4])
	}
}

// TestBitsWiden: Bits gives the upper halves of bfloat16 values and refuses a float32 that is not one,
// wherever it stands; Widen gives the values back, bit for bit.
func TestBitsWiden(t *testing.T) {
	src := []float32{0, float32(math.Copysign(0, -1)), 1, -2.5, float32(math.Inf(1)), math.Float32frombits(0x00010000), 3.140625}
	bits := make([]uint16, len(src))
	if !Bits(bits, src) {
		t.Fatal("bfloat16 values refused")
	}
	back := make([]float32, len(bits))
	Widen(back, bits)
	for i := range src {
		if math.Float32bits(back[i]) != math.Float32bits(src[i]) || uint32(bits[i])<<16 != math.Float32bits(src[i]) {
			t.Errorf("value %d: %#x -> bits %#04x -> %#x", i, math.Float32bits(src[i]), bits[i], math.Float32bits(back[i]))
		}
	}
	for _, at := range []int{0, 3, len(src) - 1} {
		w := append([]float32(nil), src...)
		w[at] = math.Float32frombits(math.Float32bits(w[at]) | 0x8000)
		if Bits(bits, w) {
			t.Errorf("a float32 value at %d taken for bfloat16", at)
		}
	}
}
