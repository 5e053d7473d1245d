package cuda

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// The weight upload path. A weight is copied to the device on the backend's copy stream, not on the
// compute stream: the copy engine then fills it while kernels queued earlier still run, and the upload
// waits for its own copy only (the host buffer may be reused once Upload returns). Its device memory is
// allocated on the copy stream as well; the stream-ordered allocator makes a block freed on the compute
// stream safe to reuse there, and every weight's copy has finished (the upload waited for it) before a
// kernel that reads it is queued.
//
// From pinned memory (AllocHost) the copy engine reads the caller's buffer directly, at the full
// host-to-device rate. From ordinary memory each piece is first copied into the pinned staging buffer,
// by all CPUs at once.

var _ ops.HostMemory = (*Backend)(nil)

// hostAllocs is the registry of pinned host buffers handed out by AllocHost, to recognise them by
// address (an Upload's bytes anywhere inside one are copied from directly).
type hostAllocs struct {
	mu     sync.Mutex
	m      map[uintptr]int  // first byte -> length
	starts []uintptr        // the keys of m, ascending: a host cache holds thousands of buffers
	stable map[uintptr]bool // buffers marked immutable (stable.go)
	// checked: per stable buffer, the experts (their six parts' addresses and lengths) whose bytes were
	// checked once: the bytes of a stable buffer never change, so a second upload skips the check.
	checked map[uintptr]map[[6][2]uintptr]bool
	// foreign: buffers of another backend's AllocHost registered here by AdoptHost (hostshare.go): copied
	// from as pinned, never freed here, never stable.
	foreign map[uintptr]bool
}

// partsKey identifies an expert's six parts by address and length.
func partsKey(parts [6][]byte) [6][2]uintptr {
	var k [6][2]uintptr
	for i, p := range parts {
		k[i] = [2]uintptr{uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p))}
	}
	return k
}

// bufferOf returns the registered buffer that holds all six parts of an expert, or false when they are
// not all in one. Under mu.
func (h *hostAllocs) bufferOf(parts [6][]byte) (uintptr, bool) {
	p, ok := h.find(parts[0])
	for _, part := range parts[1:] {
		if q, in := h.find(part); !in || q != p {
			return 0, false
		}
	}
	return p, ok
}

// checkedBefore reports whether the expert made of parts (all in stable buffers) was checked before.
func (h *hostAllocs) checkedBefore(parts [6][]byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.bufferOf(parts)
	return ok && h.checked[p][partsKey(parts)]
}

// markChecked records that the expert made of parts (all in stable buffers) passed its checks, when all
// six lie in one buffer (whose release forgets the record).
func (h *hostAllocs) markChecked(parts [6][]byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.bufferOf(parts)
	if !ok {
		return
	}
	if h.checked == nil {
		h.checked = map[uintptr]map[[6][2]uintptr]bool{}
	}
	if h.checked[p] == nil {
		h.checked[p] = map[[6][2]uintptr]bool{}
	}
	h.checked[p][partsKey(parts)] = true
}

// add registers buffer p of n bytes. Under mu.
func (h *hostAllocs) add(p uintptr, n int) {
	if h.m == nil {
		h.m = map[uintptr]int{}
	}
	h.m[p] = n
	i, _ := slices.BinarySearch(h.starts, p)
	h.starts = slices.Insert(h.starts, i, p)
}

// remove unregisters buffer p and reports whether it was registered. Under mu.
func (h *hostAllocs) remove(p uintptr) bool {
	if _, ok := h.m[p]; !ok {
		return false
	}
	delete(h.m, p)
	delete(h.foreign, p)
	delete(h.stable, p)
	delete(h.checked, p)
	if i, ok := slices.BinarySearch(h.starts, p); ok {
		h.starts = slices.Delete(h.starts, i, i+1)
	}
	return true
}

// find returns the first byte of the registered buffer that holds all of src, or false. Under mu.
func (h *hostAllocs) find(src []byte) (uintptr, bool) {
	if len(src) == 0 {
		return 0, false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(src)))
	hi := lo + uintptr(len(src))
	i, ok := slices.BinarySearch(h.starts, lo) // the buffer starting at lo, or i-1 the last before it
	if !ok {
		i--
	}
	if i < 0 {
		return 0, false
	}
	p := h.starts[i]
	return p, hi <= p+uintptr(h.m[p])
}

// AllocHost returns n bytes of page-locked host memory (cuMemHostAlloc, portable), which Upload and
// UploadExpert copy from without staging. FreeHost releases it; Close releases what is left.
func (b *Backend) AllocHost(n int) ([]byte, error) {
	const op = "AllocHost"
	if n <= 0 {
		return nil, argErr(op, "%d bytes", n)
	}
	var p unsafe.Pointer
	err := b.run(op, func(c *opCtx) error {
		var err error
		if p, err = b.dv.AllocPinned(n); err != nil {
			return err
		}
		b.hosts.mu.Lock() // registered on the CUDA thread, so that Close frees it if FreeHost never comes
		b.hosts.add(uintptr(p), n)
		b.hosts.mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// FreeHost releases a buffer AllocHost returned (identified by its first byte), after the copies
// already queued.
func (b *Backend) FreeHost(buf []byte) error {
	const op = "FreeHost"
	if len(buf) == 0 {
		return argErr(op, "empty buffer")
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	// Looked up and removed on the CUDA thread: a Close that came first has freed it with the rest.
	return b.run(op, func(c *opCtx) error {
		b.hosts.mu.Lock()
		ok := !b.hosts.foreign[p] && b.hosts.remove(p)
		b.hosts.mu.Unlock()
		if !ok {
			return fmt.Errorf("%w: %#x is not a buffer from AllocHost (or was freed)", ErrArgument, p)
		}
		return b.freeHost(p)
	})
}

// freeHost frees pinned buffer p once the copy stream is done with it; on the CUDA thread.
func (b *Backend) freeHost(p uintptr) error { return b.dv.FreePinned(p, false) }

// releaseHosts frees every pinned buffer still registered (at Close; on the CUDA thread).
func (b *Backend) releaseHosts() error {
	b.hosts.mu.Lock()
	m, foreign := b.hosts.m, b.hosts.foreign
	b.hosts.m, b.hosts.stable, b.hosts.starts, b.hosts.checked, b.hosts.foreign = nil, nil, nil, nil, nil
	b.hosts.mu.Unlock()
	var errs []error
	for p := range m {
		if foreign[p] { // another backend's (AdoptHost): it frees it
			continue
		}
		errs = append(errs, b.dv.FreePinned(p, true))
	}
	return errors.Join(errs...)
}

// pinned reports whether all of src lies inside one buffer from AllocHost.
func (b *Backend) pinned(src []byte) bool {
	b.hosts.mu.Lock()
	defer b.hosts.mu.Unlock()
	_, ok := b.hosts.find(src)
	return ok
}

// uploadBytes copies src to dst on the copy stream and waits for it: directly from a pinned buffer, else
// through staging. On the CUDA thread.
func (b *Backend) uploadBytes(dst uint64, src []byte) error {
	if !b.pinned(src) {
		return b.dv.StageCopy(dst, src)
	}
	if err := b.dv.CopyAsync(dst, src); err != nil {
		return err
	}
	return b.dv.SyncCopy()
}
