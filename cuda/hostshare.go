package cuda

import (
	"fmt"
	"unsafe"
)

// Pinned buffers shared between backends. Several backends of one process (one per device, or one device
// opened twice) can upload from the same page-locked buffer: AllocHost allocates it portable
// (CU_MEMHOSTALLOC_PORTABLE), so it is pinned for every context, not only the allocating one. Upload and
// UploadExpert recognise pinned buffers by their own registry, though: AdoptHost enters another backend's
// buffer there, so that this backend's copy engine reads it directly instead of staging it through the
// CPU. An adopted buffer is never freed by this backend (not by FreeHost, not at Close) and is never
// stable (MarkStable refuses it), so every upload from it has finished copying when it returns: the owner
// may free it once every backend that uploads from it has returned and called ForgetHost.

// AdoptHost registers buf, a whole buffer another Backend's AllocHost returned, as pinned memory this
// backend copies from directly. It touches no CUDA state.
func (b *Backend) AdoptHost(buf []byte) error {
	const op = "AdoptHost"
	if len(buf) == 0 {
		return argErr(op, "empty buffer")
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	b.hosts.mu.Lock()
	defer b.hosts.mu.Unlock()
	if _, ok := b.hosts.m[p]; ok {
		return fmt.Errorf("%w: %s: %#x is registered already", ErrArgument, op, p)
	}
	if q, ok := b.hosts.find(buf[:1]); ok && q != p { // inside a buffer registered here
		return fmt.Errorf("%w: %s: %#x lies inside buffer %#x", ErrArgument, op, p, q)
	}
	b.hosts.add(p, len(buf))
	if b.hosts.foreign == nil {
		b.hosts.foreign = map[uintptr]bool{}
	}
	b.hosts.foreign[p] = true
	return nil
}

// ForgetHost unregisters a buffer AdoptHost registered (identified by its first byte); a buffer it does
// not hold as adopted is left alone.
func (b *Backend) ForgetHost(buf []byte) {
	if len(buf) == 0 {
		return
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	b.hosts.mu.Lock()
	defer b.hosts.mu.Unlock()
	if b.hosts.foreign[p] {
		b.hosts.remove(p)
	}
}
