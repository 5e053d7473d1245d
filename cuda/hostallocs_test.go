package cuda

import (
	"testing"
	"unsafe"
)

// TestHostAllocsFind: the registry finds the buffer holding a slice by binary search, refuses slices
// that straddle a buffer's end or lie outside every buffer, and forgets removed buffers. No GPU needed.
func TestHostAllocsFind(t *testing.T) {
	mem := make([]byte, 1000)
	base := uintptr(unsafe.Pointer(&mem[0]))
	var h hostAllocs
	h.add(base+500, 300) // registered out of order
	h.add(base, 100)
	h.add(base+200, 200)
	for _, tc := range []struct {
		name     string
		from, to int
		want     uintptr
		ok       bool
	}{
		{"first byte of a buffer", 0, 1, base, true},
		{"a whole buffer", 200, 400, base + 200, true},
		{"inside the last", 600, 790, base + 500, true},
		{"straddles an end", 90, 110, 0, false},
		{"between buffers", 120, 130, 0, false},
		{"past the last", 810, 900, 0, false},
		{"empty", 50, 50, 0, false},
	} {
		p, ok := h.find(mem[tc.from:tc.to])
		if ok != tc.ok || (ok && p != tc.want) {
			t.Errorf("%s: find = %#x, %v; want %#x, %v", tc.name, p, ok, tc.want, tc.ok)
		}
	}
	if !h.remove(base + 200) {
		t.Fatal("remove of a registered buffer reported false")
	}
	if h.remove(base + 200) {
		t.Error("a second remove reported true")
	}
	if _, ok := h.find(mem[250:300]); ok {
		t.Error("a removed buffer is still found")
	}
	if p, ok := h.find(mem[550:560]); !ok || p != base+500 {
		t.Errorf("after a removal: find = %#x, %v; want the buffer at +500", p, ok)
	}
}
