package checkpoint

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestDecodeMXFP4PublicGolden decodes the first 16 columns of the public golden (K3_SPEC section 4:
// layer 1, expert 0, w1, row 0 of the real shard). The bytes are written out by hand, not by the
// encoder: all 16 values are E2M1 values times 2^-6, so the group's scale byte is 127-6 = 121 and the
// codes are 4->6, 0.5->1, -0.5->9, -1.5->11, -4->14, -2->12, 1.5->3, 1->2, 3->5, -0->8, -1.5->11,
// -1->10, -1.5->11, -0.5->9, 1->2, -1->10 (low nibble first).
func TestDecodeMXFP4PublicGolden(t *testing.T) {
	want := []float32{0.0625, 0.0078125, -0.0078125, -0.0234375, -0.0625, -0.03125, 0.0234375, 0.015625,
		0.046875, float32(math.Copysign(0, -1)), -0.0234375, -0.015625, -0.0234375, -0.0078125, 0.015625, -0.015625}
	packed := make([]byte, 16) // one group of 32 columns; the last 16 are zero
	copy(packed, []byte{0x16, 0xb9, 0xce, 0x23, 0x85, 0xab, 0x9b, 0xa2})
	got := make([]float32, 32)
	if err := DecodeMXFP4Row(got, packed, []byte{121}, 0); err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if got[i] != w || math.Signbit(float64(got[i])) != math.Signbit(float64(w)) {
			t.Errorf("column %d = %v, want %v", i, got[i], w)
		}
	}
	// The encoder must produce the same bytes from the values.
	p2, s2 := make([]byte, 16), make([]byte, 1)
	if err := EncodeMXFP4Row(p2, s2, got); err != nil {
		t.Fatal(err)
	}
	if string(p2) != string(packed) || s2[0] != 121 {
		t.Errorf("EncodeMXFP4Row = % x scale %d, want % x scale 121", p2, s2[0], packed)
	}
}

// TestDecodeMXFP4Exact checks every (scale, code) pair against an independent float64 definition:
// math.Ldexp(code value, s-127), converted to float32 (exact when representable, which the decoder must
// then match bit for bit, -0 included).
func TestDecodeMXFP4Exact(t *testing.T) {
	mags := []float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	for s := range 253 { // 253 and 254 overflow for some codes: TestDecodeMXFP4Refuses
		packed := make([]byte, 16)
		for c := range 16 {
			packed[c/2] |= byte(c) << (4 * (c % 2))
		}
		got := make([]float32, 32)
		if err := DecodeMXFP4Row(got, packed, []byte{byte(s)}, 0); err != nil {
			t.Fatalf("scale %d: %v", s, err)
		}
		for c := range 16 {
			w := math.Ldexp(mags[c%8], s-127)
			if c >= 8 {
				w = -w
			}
			if float64(float32(w)) != w {
				t.Fatalf("scale %d code %d: %g is not a float32; the exactness argument is wrong", s, c, w)
			}
			if math.Float32bits(got[c]) != math.Float32bits(float32(w)) {
				t.Errorf("scale %d code %d = %g (%#08x), want %g", s, c, got[c], math.Float32bits(got[c]), w)
			}
		}
	}
}

func TestDecodeMXFP4Refuses(t *testing.T) {
	tests := []struct {
		name   string
		packed []byte
		scales []byte
		cols   int
		is     error
		want   string
	}{
		{"NaN scale", make([]byte, 32), []byte{127, 255}, 64, ErrMXFP4, "row 7 group 1 (columns 32..63): scale byte 255 is NaN"},
		{"overflow", []byte{0x70, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, []byte{253}, 32, ErrMXFP4,
			"row 7 group 0 column 1: scale 2^126 times code value 6 overflows float32"},
		{"odd width", make([]byte, 1), []byte{127}, 3, ErrArgument, "MXFP4 row 7 of width 3"},
		{"short scales", make([]byte, 32), []byte{127}, 64, ErrArgument, "got 32 packed and 1 scale bytes, want 32 and 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := DecodeMXFP4Row(make([]float32, tc.cols), tc.packed, tc.scales, 7)
			if !errors.Is(err, tc.is) || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %v containing %q", err, tc.is, tc.want)
			}
		})
	}
	// Scale 254 still decodes code 1 (2^127) exactly.
	got := make([]float32, 2)
	if err := DecodeMXFP4Row(got, []byte{0x02}, []byte{254}, 0); err != nil || got[0] != 0x1p127 || got[1] != 0 {
		t.Errorf("scale 254, code 2 (1.0): %v %v, want 2^127", got, err)
	}
}

// TestDecodeMXFP4Matrix decodes a K3 w2-shaped tail (rows of 3072 columns, 96 groups) and checks it
// against the row function and the matrix bookkeeping errors.
func TestDecodeMXFP4Matrix(t *testing.T) {
	const rows, cols = 3, 3072
	pw, sw := MXFP4RowBytes(cols)
	if pw != 1536 || sw != 96 {
		t.Fatalf("MXFP4RowBytes(3072) = %d, %d; want 1536, 96 (K3 w2)", pw, sw)
	}
	r := rand.New(rand.NewPCG(1, 2))
	packed, scales := make([]byte, rows*pw), make([]byte, rows*sw)
	for i := range packed {
		packed[i] = byte(r.UintN(256))
	}
	for i := range scales {
		scales[i] = byte(100 + r.UintN(50))
	}
	got := make([]float32, rows*cols)
	if err := DecodeMXFP4(got, packed, scales, rows, cols); err != nil {
		t.Fatal(err)
	}
	row := make([]float32, cols)
	for i := range rows {
		if err := DecodeMXFP4Row(row, packed[i*pw:(i+1)*pw], scales[i*sw:(i+1)*sw], i); err != nil {
			t.Fatal(err)
		}
		for c := range cols {
			if math.Float32bits(row[c]) != math.Float32bits(got[i*cols+c]) {
				t.Fatalf("row %d column %d: matrix %v, row %v", i, c, got[i*cols+c], row[c])
			}
		}
	}
	scales[sw+5] = 255
	if err := DecodeMXFP4(got, packed, scales, rows, cols); err == nil || !strings.Contains(err.Error(), "row 1 group 5") {
		t.Errorf("NaN scale in row 1 group 5: %v", err)
	}
	if err := DecodeMXFP4(got[1:], packed, scales, rows, cols); !errors.Is(err, ErrArgument) {
		t.Errorf("short dst: %v, want ErrArgument", err)
	}
}

func TestDecodeFloats(t *testing.T) {
	got := make([]float32, 2)
	if err := Decode(got, BF16, []byte{0x80, 0x3f, 0x00, 0xc0}); err != nil || got[0] != 1 || got[1] != -2 {
		t.Errorf("BF16: %v %v, want [1 -2]", got, err)
	}
	if err := Decode(got, F32, []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0}); err != nil || got[0] != 1 || got[1] != -2 {
		t.Errorf("F32: %v %v, want [1 -2]", got, err)
	}
	for _, tc := range []struct {
		dt DType
		n  int
	}{{BF16, 3}, {F32, 7}, {U8, 2}} {
		if err := Decode(got, tc.dt, make([]byte, tc.n)); !errors.Is(err, ErrArgument) {
			t.Errorf("Decode(%s, %d bytes): %v, want ErrArgument", tc.dt, tc.n, err)
		}
	}
}
