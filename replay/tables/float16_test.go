package tables

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/potato-k3/potato-k3/replay"
)

// refHalf is an IEEE binary16 conversion written independently of x448/float16, for checking it: scale
// |x| so that the half's significand is an integer, round that to nearest even in float64 (exact: a
// float32 has 24 significant bits), and rebuild the bits. NaN is not handled.
func refHalf(x float32) uint16 {
	sign := uint16(0)
	if math.Signbit(float64(x)) {
		sign = 0x8000
	}
	a := math.Abs(float64(x))
	if math.IsInf(a, 0) {
		return sign | 0x7c00
	}
	if a < 0x1p-14 { // subnormal range: units of 2^-24; 1024 units is the smallest normal, whose bits are 0x400
		return sign | uint16(math.RoundToEven(a*0x1p24))
	}
	_, e := math.Frexp(a) // a = f * 2^e, f in [0.5, 1)
	e--                   // a = m * 2^e, m in [1, 2)
	m := math.RoundToEven(a * math.Ldexp(1, 10-e))
	if m == 2048 { // rounded up to the next binade
		m, e = 1024, e+1
	}
	if e > 15 {
		return sign | 0x7c00 // overflow: infinity, as IEEE round to nearest gives
	}
	return sign | uint16(e+15)<<10 | uint16(m-1024)
}

// refWiden is binary16 bits to float32, again without x448.
func refWiden(h uint16) float32 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e, m := int(h>>10&0x1f), float64(h&0x3ff)
	switch e {
	case 0:
		return float32(sign * math.Ldexp(m, -24))
	case 31:
		return float32(sign * math.Inf(1))
	}
	return float32(sign * math.Ldexp(1024+m, e-25))
}

// TestRefHalf checks the reference itself on values whose halves are known.
func TestRefHalf(t *testing.T) {
	tests := []struct {
		x    float32
		want uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {float32(math.Copysign(0, -1)), 0x8000}, {0.5, 0x3800},
		{65504, 0x7bff}, {65519, 0x7bff}, {65520, 0x7c00}, {float32(math.Inf(-1)), 0xfc00},
		{0x1p-24, 0x0001}, {0x1p-25, 0x0000}, {0x3p-25, 0x0002}, {0x1p-14, 0x0400}, {0x3ffp-24 + 0x1p-25, 0x0400},
		{1 + 0x1p-11, 0x3c00}, {1 + 0x3p-11, 0x3c02}, {1 + 0x1p-10, 0x3c01}, {2047, 0x67ff}, {2049, 0x6800},
	}
	for _, tt := range tests {
		if got := refHalf(tt.x); got != tt.want {
			t.Errorf("refHalf(%g): -want %#04x +got %#04x", tt.x, tt.want, got)
		}
		if w := refWiden(tt.want); tt.want&0x7c00 != 0x7c00 && refHalf(w) != tt.want {
			t.Errorf("refWiden(%#04x) = %g does not convert back", tt.want, w)
		}
	}
}

// TestHiddenFloat16 builds a float16 hidden table from values over the whole half range (ties, subnormals,
// overflow, signed zeros) and checks every stored half against refHalf, then that reading it back through
// IPC and Parquet widens each to exactly refWiden of those bits.
func TestHiddenFloat16(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const dim = 64
	special := []float32{0, float32(math.Copysign(0, -1)), 1 + 0x1p-11, 1 + 0x3p-11, -(1 + 0x1p-11), 0x1p-25, 0x3p-25,
		0x1p-26, 65504, 65519.99, 65520, -70000, float32(math.Inf(1)), 2049, 2051, 1e-7, -6.1e-5}
	vals := make([]float32, 40*dim)
	for i := range vals {
		switch {
		case i < len(special):
			vals[i] = special[i]
		case i%3 == 0: // a half's tie point: a 12-bit significand with its last bit set
			vals[i] = float32(math.Ldexp(float64(2048+2*rng.IntN(1024)+1), rng.IntN(30)-36))
		default:
			vals[i] = float32(math.Ldexp(rng.NormFloat64(), rng.IntN(44)-28))
		}
	}
	in := []replay.Result{{SeqID: 1, Tokens: make([]int32, 40), Targets: make([]int32, 40),
		Stats:  makeResults(1, 1, spec{seq: 1, tokens: 40})[0].Stats,
		Hidden: []replay.LayerVectors{{Layer: 0, Dim: dim, Values: vals}}}}
	for i := range in[0].Targets {
		in[0].Targets[i] = -1
	}
	mem := checkedAlloc(t)
	set, err := Build(in, Options{HiddenFloat16: true, Allocator: mem, BatchRows: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Release()
	i := 0
	for _, rec := range set.Hidden.Records {
		halves := rec.Column(3).(*array.FixedSizeList).ListValues().(*array.Float16).Values()
		for _, h := range halves {
			if want := refHalf(vals[i]); h.Uint16() != want {
				t.Errorf("value %d = %g: -want half %#04x +got %#04x", i, vals[i], want, h.Uint16())
			}
			i++
		}
	}
	if i != len(vals) {
		t.Fatalf("table holds %d halves, want %d", i, len(vals))
	}

	var ipcBuf, pqBuf bytes.Buffer
	if err := WriteTableIPC(&ipcBuf, set.Hidden); err != nil {
		t.Fatal(err)
	}
	if err := WriteTableParquet(&pqBuf, set.Hidden); err != nil {
		t.Fatal(err)
	}
	fromIPC, err := ReadIPC(&ipcBuf, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer fromIPC.Release()
	fromPQ, err := ReadParquetFrom(bytes.NewReader(pqBuf.Bytes()), mem)
	if err != nil {
		t.Fatal(err)
	}
	defer fromPQ.Release()
	for name, hidden := range map[string]*Table{"ipc": fromIPC, "parquet": fromPQ} {
		back, err := FromSet(&Set{Tokens: set.Tokens, Hidden: hidden})
		if err != nil {
			t.Fatalf("%s: FromSet: %v", name, err)
		}
		got := back[0].Hidden[0]
		if got.Dim != dim || len(got.Values) != len(vals) {
			t.Fatalf("%s: dim %d with %d values, want %d with %d", name, got.Dim, len(got.Values), dim, len(vals))
		}
		for i, v := range got.Values {
			if want := refWiden(refHalf(vals[i])); math.Float32bits(v) != math.Float32bits(want) {
				t.Errorf("%s: value %d = %g: -want %g +got %g", name, i, vals[i], want, v)
			}
		}
	}
}
