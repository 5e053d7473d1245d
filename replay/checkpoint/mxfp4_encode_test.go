package checkpoint

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// TestMXFP4RoundTrip encodes rows whose groups are E2M1 values times one power of two (what the synthetic
// writer produces, and what a real checkpoint decodes to) and wants them back bit for bit.
func TestMXFP4RoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, cols := range []int{2, 30, 32, 34, 96, 3584} {
		src := make([]float32, cols)
		for g := 0; g < cols; g += MXFP4GroupSize {
			k := r.IntN(240) - 125 // power of two of the group, -125..114: codes times 2^k stay in range
			for c := g; c < min(g+MXFP4GroupSize, cols); c++ {
				src[c] = e2m1[r.UintN(16)] * float32(math.Ldexp(1, k))
			}
		}
		pw, sw := MXFP4RowBytes(cols)
		packed, scales := make([]byte, pw), make([]byte, sw)
		if err := EncodeMXFP4Row(packed, scales, src); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, cols)
		if err := DecodeMXFP4Row(got, packed, scales, 0); err != nil {
			t.Fatal(err)
		}
		for c := range src {
			if math.Float32bits(got[c]) != math.Float32bits(src[c]) {
				t.Fatalf("cols %d column %d: decoded %g, encoded %g", cols, c, got[c], src[c])
			}
		}
	}
}

// TestE2M1CodeIsNearest compares the rounding with a brute-force search over the 8 magnitudes (ties to
// the even code), on a grid that hits every midpoint, and on random values.
func TestE2M1CodeIsNearest(t *testing.T) {
	mags := []float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	nearest := func(v float64) byte {
		best := 0
		for c := 1; c < 8; c++ {
			d, db := math.Abs(math.Abs(v)-mags[c]), math.Abs(math.Abs(v)-mags[best])
			if d < db || (d == db && c%2 == 0) {
				best = c
			}
		}
		if math.Signbit(v) {
			return byte(best) | 8
		}
		return byte(best)
	}
	r := rand.New(rand.NewPCG(5, 6))
	for i := -64; i <= 64; i++ {
		for _, v := range []float64{float64(i) / 8, r.Float64()*16 - 8} {
			if got, want := E2M1Code(v), nearest(v); got != want {
				t.Errorf("E2M1Code(%g) = %d, want %d", v, got, want)
			}
		}
	}
	if E2M1Code(math.Copysign(0, -1)) != 8 || E2M1Code(100) != 7 || E2M1Code(-100) != 15 {
		t.Error("-0 must keep its sign and large magnitudes must saturate")
	}
}

func TestEncodeMXFP4Errors(t *testing.T) {
	nan := float32(math.NaN())
	if err := EncodeMXFP4Row(make([]byte, 1), make([]byte, 1), []float32{1, nan}); !errors.Is(err, ErrMXFP4) {
		t.Errorf("NaN input: %v, want ErrMXFP4", err)
	}
	if err := QuantizeMXFP4Row(make([]byte, 1), []float32{1, 2}, []byte{255}); !errors.Is(err, ErrMXFP4) {
		t.Errorf("scale 255: %v, want ErrMXFP4", err)
	}
	if err := PackMXFP4Row(make([]byte, 1), []byte{16, 0}); !errors.Is(err, ErrArgument) {
		t.Errorf("code 16: %v, want ErrArgument", err)
	}
	if err := EncodeMXFP4(make([]byte, 2), make([]byte, 1), make([]float32, 4), 2, 2); !errors.Is(err, ErrArgument) {
		t.Errorf("matrix with too few scale bytes: %v, want ErrArgument", err)
	}
	// A matrix, and quantization with given scales: 0.3 under scale 2^-2 is 1.2 -> code 2 (1.0) -> 0.25.
	packed, scales := make([]byte, 2), make([]byte, 2)
	if err := EncodeMXFP4(packed, scales, []float32{1, -6, 0.5, 0}, 2, 2); err != nil || packed[0] != 0xf2 || scales[0] != 127 {
		t.Errorf("EncodeMXFP4: % x scales %v, %v; want f2.. scale 127", packed, scales, err)
	}
	if err := QuantizeMXFP4Row(packed[:1], []float32{0.3, -0.3}, []byte{125}); err != nil || packed[0] != 0xa2 {
		t.Errorf("QuantizeMXFP4Row(0.3, -0.3; 2^-2) = % x, %v; want a2", packed[:1], err)
	}
}
