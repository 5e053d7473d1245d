package model

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
)

// naiveNonFinite is firstNonFinite's contract as the plain element loop.
func naiveNonFinite(dt checkpoint.DType, raw []byte) int {
	switch dt {
	case checkpoint.BF16:
		for i := 0; i+2 <= len(raw); i += 2 {
			if binary.LittleEndian.Uint16(raw[i:])&0x7f80 == 0x7f80 {
				return i / 2
			}
		}
	case checkpoint.F32:
		for i := 0; i+4 <= len(raw); i += 4 {
			if binary.LittleEndian.Uint32(raw[i:])&0x7f800000 == 0x7f800000 {
				return i / 4
			}
		}
	}
	return -1
}

// finiteBytes fills n bytes with random finite elements of dt, among them the largest finite exponent
// (one below all ones) and values that differ from a non-finite one in a single exponent bit.
func finiteBytes(rng *rand.Rand, dt checkpoint.DType, n int) []byte {
	raw := make([]byte, n)
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	switch dt {
	case checkpoint.BF16:
		for i := 0; i+2 <= n; i += 2 {
			v := binary.LittleEndian.Uint16(raw[i:])
			if v&0x7f80 == 0x7f80 {
				v &^= 1 << (7 + rng.IntN(8)) // clear one exponent bit
			}
			binary.LittleEndian.PutUint16(raw[i:], v)
		}
	case checkpoint.F32:
		for i := 0; i+4 <= n; i += 4 {
			v := binary.LittleEndian.Uint32(raw[i:])
			if v&0x7f800000 == 0x7f800000 {
				v &^= 1 << (23 + rng.IntN(8))
			}
			binary.LittleEndian.PutUint32(raw[i:], v)
		}
	}
	return raw
}

// plant makes element e of raw NaN or Inf (sign and mantissa random).
func plant(rng *rand.Rand, dt checkpoint.DType, raw []byte, e int) {
	switch dt {
	case checkpoint.BF16:
		v := uint16(rng.Uint32())&0x807f | 0x7f80
		binary.LittleEndian.PutUint16(raw[2*e:], v)
	case checkpoint.F32:
		binary.LittleEndian.PutUint32(raw[4*e:], rng.Uint32()&0x807fffff|0x7f800000)
	}
}

// TestFirstNonFinite: the word-wise and parallel scans equal the element loop, for hits at every position
// inside a word and a block, at chunk edges, with several hits (the first one wins), tails and sizes that
// are not multiples of the element, and tensors large enough to be scanned in parallel.
func TestFirstNonFinite(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 7))
	for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F32} {
		size := int(dt.Size())
		for _, n := range []int{0, 1, 3, 31, 32, 33, 64, 100, 4099, parallelScan + 3*scanChunk + 5} {
			raw := finiteBytes(rng, dt, n)
			if got, want := firstNonFinite(dt, raw), naiveNonFinite(dt, raw); got != want || want != -1 {
				t.Fatalf("%s, %d finite bytes: got %d, want %d (-1)", dt, n, got, want)
			}
			elems := n / size
			if elems == 0 {
				continue
			}
			spots := []int{0, elems - 1, elems / 2, rng.IntN(elems)}
			for _, c := range []int{1, 2, 3} { // chunk edges of the parallel scan
				if e := c*scanChunk/size - 1; e+1 < elems {
					spots = append(spots, e, e+1)
				}
			}
			for _, e := range spots {
				bad := append([]byte(nil), raw...)
				plant(rng, dt, bad, e)
				if later := e + 1 + rng.IntN(max(elems-e, 1)); later < elems { // a second hit after it
					plant(rng, dt, bad, later)
				}
				if got := firstNonFinite(dt, bad); got != e {
					t.Errorf("%s, %d bytes, first NaN/Inf at %d: got %d", dt, n, e, got)
				}
			}
		}
	}
	if got := firstNonFinite(checkpoint.U8, []byte{0xff, 0xff, 0xff, 0xff}); got != -1 {
		t.Errorf("U8: got %d, want -1", got)
	}
}

// TestCheckFinite: the error is typed and carries the index.
func TestCheckFinite(t *testing.T) {
	err := CheckFinite(checkpoint.BF16, []byte{0x80, 0x3f, 0x80, 0x7f})
	var nf *NonFiniteError
	if !errors.As(err, &nf) || nf.Index != 1 {
		t.Fatalf("err = %v, want a *NonFiniteError at 1", err)
	}
	if err := CheckFinite(checkpoint.BF16, []byte{0x80, 0x3f}); err != nil {
		t.Errorf("finite: %v", err)
	}
}

// BenchmarkFirstNonFinite scans 64 MiB of finite bf16 weights (every byte read once).
func BenchmarkFirstNonFinite(b *testing.B) {
	raw := finiteBytes(rand.New(rand.NewPCG(1, 1)), checkpoint.BF16, 64<<20)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if firstNonFinite(checkpoint.BF16, raw) != -1 {
			b.Fatal("hit")
		}
	}
}
