package checkpoint

import "unsafe"

// DirectAlignment is the alignment O_DIRECT reads use for file offsets, lengths and buffer addresses.
// 4096 covers the logical block size of every common device (512 or 4096) and the page size.
const DirectAlignment = 4096

// AlignedBuffer returns a zeroed slice of n bytes whose first byte sits at an address that is a multiple
// of align, which must be a power of two (DirectAlignment for O_DIRECT). It over-allocates by align bytes
// and slices; the Go heap does not move objects, so the alignment holds for the slice's lifetime. The
// capacity is clipped to n so that appends cannot run into the padding.
func AlignedBuffer(n, align int) []byte {
	if align < 1 || align&(align-1) != 0 {
		align = DirectAlignment
	}
	if n < 0 {
		n = 0
	}
	buf := make([]byte, n+align)
	off := alignOffset(buf, align)
	return buf[off : off+n : off+n]
}

// alignOffset is how many bytes past the start of b the next align-aligned address is.
func alignOffset(b []byte, align int) int {
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return int((uintptr(align) - addr%uintptr(align)) % uintptr(align))
}

// isAligned reports whether b starts at a multiple of align and has a length that is a multiple of it.
func isAligned(b []byte, align int) bool {
	return len(b)%align == 0 && (len(b) == 0 || alignOffset(b, align) == 0)
}
