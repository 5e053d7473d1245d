package cuda

import (
	"slices"
	"testing"
	"unsafe"
)

// TestGroupByBuffer: experts whose six parts lie in one registered buffer at offsets that are multiples
// of 16 from the span's start are grouped per buffer with the span that covers them; an expert with a
// part elsewhere, or a buffer whose parts are misaligned, is loose. No GPU needed.
func TestGroupByBuffer(t *testing.T) {
	bufA := make([]byte, 4096) // two aligned experts
	bufB := make([]byte, 4096) // one expert with a part 8 bytes off
	bufC := make([]byte, 1024) // the far part of a split expert
	var h hostAllocs
	for _, b := range [][]byte{bufA, bufB, bufC} {
		h.add(uintptr(unsafe.Pointer(&b[0])), len(b))
	}
	// parts places six parts of 32 bytes in buf from off, step apart.
	parts := func(buf []byte, off, step int) [6][]byte {
		var p [6][]byte
		for i := range p {
			p[i] = buf[off+i*step : off+i*step+32]
		}
		return p
	}
	a0, a1 := parts(bufA, 64, 48), parts(bufA, 512, 64)
	b0 := parts(bufB, 0, 48)
	b0[3] = bufB[1000:1032] // 1000 is not a multiple of 16 from the span's start (0)
	split := parts(bufA, 2048, 48)
	split[5] = bufC[0:32]
	groups, loose := groupByBuffer(&h, [][6][]byte{a0, b0, a1, split})
	if len(groups) != 1 || !slices.Equal(groups[0].idx, []int{0, 2}) {
		t.Fatalf("groups %+v; want one group of experts 0 and 2", groups)
	}
	g := groups[0]
	if lo, hi := uintptr(unsafe.Pointer(&bufA[64])), uintptr(unsafe.Pointer(&bufA[512+5*64+32-1]))+1; g.lo != lo || g.hi != hi {
		t.Errorf("span [%#x, %#x); want [%#x, %#x)", g.lo, g.hi, lo, hi)
	}
	if len(g.host) != int(g.hi-g.lo) || &g.host[0] != &bufA[64] {
		t.Errorf("span bytes: %d from %p; want %d from %p", len(g.host), &g.host[0], g.hi-g.lo, &bufA[64])
	}
	slices.Sort(loose)
	if !slices.Equal(loose, []int{1, 3}) {
		t.Errorf("loose %v; want [1 3] (a misaligned buffer and a split expert)", loose)
	}
}
