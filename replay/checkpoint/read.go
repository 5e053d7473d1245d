package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// ReadRequest asks for one tensor's bytes in Dst, which must be exactly Tensor.Size long.
type ReadRequest struct {
	Tensor Tensor
	Dst    []byte
}

// ReadStats counts what a Dir has read since Open, for the engine's byte accounting.
type ReadStats struct {
	Tensors     int64 // tensors delivered in full
	Bytes       int64 // tensor bytes delivered into callers' buffers
	DeviceBytes int64 // bytes asked of the OS: Bytes plus O_DIRECT's alignment overhang
	Direct      int64 // segments read with O_DIRECT
	Bounced     int64 // of those, segments copied through a bounce buffer (unaligned destination or ends)
	Fallbacks   int64 // shards where O_DIRECT was refused and reads fell back to buffered I/O
}

// reader is the read side of a Dir: a counting semaphore bounding reads in flight, counters and the pool
// of aligned bounce buffers O_DIRECT needs.
type reader struct {
	slots  chan struct{}
	seg    int64
	direct bool
	stats  struct{ tensors, bytes, device, direct, bounced, fallbacks atomic.Int64 }
	bounce sync.Pool // *[]byte, aligned, seg + 2*DirectAlignment long
	// openDirect opens a shard with O_DIRECT; a field so tests can simulate a refusing file system.
	openDirect func(path string) (*os.File, error)
}

func (r *reader) init(o options) {
	r.slots = make(chan struct{}, o.workers)
	r.seg = o.segment
	r.direct = o.direct
	r.openDirect = openDirect
	n := int(o.segment) + 2*DirectAlignment // an unaligned segment spans at most this much aligned
	r.bounce.New = func() any { b := AlignedBuffer(n, DirectAlignment); return &b }
}

// fileSet holds the open handles of one shard. One *os.File per mode is enough: ReadAt is pread, which
// is safe from many goroutines at once and does not share a file position.
type fileSet struct {
	mu        sync.Mutex
	buffered  *os.File
	direct    *os.File
	directOff bool // O_DIRECT was refused for this shard: use buffered
}

// get returns the handle to read with, opening it on first use.
func (fs *fileSet) get(r *reader, path string) (f *os.File, direct bool, err error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if r.direct && !fs.directOff {
		if fs.direct == nil {
			fs.direct, err = r.openDirect(path)
			if err != nil && !directRefused(err) {
				return nil, false, err
			}
			if err != nil {
				fs.refuse(r)
			}
		}
		if fs.direct != nil {
			return fs.direct, true, nil
		}
	}
	if fs.buffered == nil {
		if fs.buffered, err = os.Open(path); err != nil {
			return nil, false, err
		}
	}
	return fs.buffered, false, nil
}

// refuse switches the shard to buffered reads; fs.mu must be held.
func (fs *fileSet) refuse(r *reader) {
	if !fs.directOff {
		fs.directOff = true
		r.stats.fallbacks.Add(1)
	}
}

func (fs *fileSet) close() error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var errs []error
	for _, f := range []*os.File{fs.buffered, fs.direct} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	fs.buffered, fs.direct = nil, nil
	return errors.Join(errs...)
}

// Close closes the shard files. Reads must not be in flight.
func (d *Dir) Close() error {
	var errs []error
	for _, s := range d.shards {
		errs = append(errs, s.files.close())
	}
	return errors.Join(errs...)
}

// Stats returns the read counters.
func (d *Dir) Stats() ReadStats {
	s := &d.reader.stats
	return ReadStats{Tensors: s.tensors.Load(), Bytes: s.bytes.Load(), DeviceBytes: s.device.Load(),
		Direct: s.direct.Load(), Bounced: s.bounced.Load(), Fallbacks: s.fallbacks.Load()}
}

// ReadInto reads the bytes of t into dst, which must be exactly t.Size long. Large tensors are split into
// segments read in parallel (see ReadBatch).
func (d *Dir) ReadInto(ctx context.Context, t Tensor, dst []byte) error {
	return d.ReadBatch(ctx, []ReadRequest{{Tensor: t, Dst: dst}})
}

// ReadBatch reads many tensors (for example the experts a layer's router chose) concurrently. Each is
// split into segments at absolute offsets that are multiples of the segment size; all segments of all
// requests share the Dir's bound on reads in flight, so concurrent callers cannot oversubscribe the disk.
// It returns the first failure (a *ReadError naming file, tensor and offset) after all started reads have
// stopped, or the context's error if it is cancelled first. On error the buffers' contents are undefined.
func (d *Dir) ReadBatch(ctx context.Context, reqs []ReadRequest) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("checkpoint: reading %d tensors: %w", len(reqs), err)
	}
	shards := make([]*shard, len(reqs))
	for i, rq := range reqs {
		t := rq.Tensor
		s := d.byFile[t.File]
		switch {
		case s == nil:
			return fmt.Errorf("%w: tensor %s: shard %q is not part of %s", ErrArgument, t.Name, t.File, d.path)
		case t.Offset < s.hdr.DataStart || t.Size < 0 || t.Size > s.hdr.Size-t.Offset:
			return fmt.Errorf("%w: tensor %s: bytes [%d, +%d) are outside the data of %s",
				ErrArgument, t.Name, t.Offset, t.Size, t.File)
		case int64(len(rq.Dst)) != t.Size:
			return fmt.Errorf("%w: tensor %s: buffer of %d bytes, want %d", ErrArgument, t.Name, len(rq.Dst), t.Size)
		}
		shards[i] = s
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		firstAt  [2]int64 // (request, offset) of firstErr
	)
	// fail keeps the failure earliest in request and file order, so that the error a damaged file gives
	// does not depend on which goroutine lost the race, and stops the other reads.
	fail := func(req int, off int64, err error) {
		mu.Lock()
		if at := [2]int64{int64(req), off}; firstErr == nil || at[0] < firstAt[0] || (at[0] == firstAt[0] && at[1] < firstAt[1]) {
			firstErr, firstAt = err, at
		}
		mu.Unlock()
		cancel()
	}
	var delivered int64
issue:
	for i, rq := range reqs {
		t := rq.Tensor
		for next := t.Offset; next < t.Offset+t.Size; {
			off, end := next, min(t.Offset+t.Size, (next/d.seg+1)*d.seg)
			next = end // the goroutine below captures off and end, which stay fixed
			dst := rq.Dst[off-t.Offset : end-t.Offset]
			select {
			case d.slots <- struct{}{}:
			case <-ctx.Done():
				break issue
			}
			wg.Go(func() {
				defer func() { <-d.slots }()
				if ctx.Err() != nil {
					return
				}
				if err := d.readSegment(shards[i], t, off, dst); err != nil {
					fail(i, off, err)
				}
			})
			delivered += end - off
		}
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("checkpoint: reading %d tensors: %w", len(reqs), err)
	}
	d.stats.tensors.Add(int64(len(reqs)))
	d.stats.bytes.Add(delivered)
	return nil
}

// readSegment reads dst from absolute offset off of the shard, with O_DIRECT when enabled and allowed.
func (d *Dir) readSegment(s *shard, t Tensor, off int64, dst []byte) error {
	f, direct, err := s.files.get(&d.reader, s.path)
	if err != nil {
		return &ReadError{File: t.File, Tensor: t.Name, Offset: off, Len: int64(len(dst)), Err: err}
	}
	if direct {
		err := d.readDirect(f, t, off, dst)
		if err == nil || !directRefused(err) {
			return err
		}
		// The device refused this alignment at read time: read this shard buffered from now on.
		s.files.mu.Lock()
		s.files.refuse(&d.reader)
		s.files.mu.Unlock()
		if f, _, err = s.files.get(&d.reader, s.path); err != nil {
			return &ReadError{File: t.File, Tensor: t.Name, Offset: off, Len: int64(len(dst)), Err: err}
		}
	}
	n, err := f.ReadAt(dst, off)
	d.stats.device.Add(int64(n))
	return readErr(t, off, len(dst), n, err)
}

// readDirect reads the aligned range covering [off, off+len(dst)) into a bounce buffer and copies the
// wanted part out. When dst, off and the length are all aligned it reads straight into dst (callers can
// arrange this for the middle segments by allocating with AlignedBuffer at the tensor's offset modulo
// DirectAlignment).
func (d *Dir) readDirect(f *os.File, t Tensor, off int64, dst []byte) error {
	const a = DirectAlignment
	lo := off &^ (a - 1)
	hi := (off + int64(len(dst)) + a - 1) &^ (a - 1)
	buf := dst
	inPlace := lo == off && isAligned(dst, a)
	if !inPlace {
		bp := d.bounce.Get().(*[]byte)
		defer d.bounce.Put(bp)
		if buf = *bp; int64(len(buf)) < hi-lo { // a segment larger than the pool's buffers: not from ReadBatch
			buf = AlignedBuffer(int(hi-lo), a)
		}
		buf = buf[:hi-lo]
	}
	// At the end of the file the aligned range overhangs it: the read stops short, with what there is.
	need := off + int64(len(dst)) - lo
	n, err := preadDirect(f, buf, lo, int(need))
	d.stats.device.Add(int64(n))
	if int64(n) < need {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		got := max(0, min(int64(n)-(off-lo), int64(len(dst))))
		return &ReadError{File: t.File, Tensor: t.Name, Offset: off, Len: int64(len(dst)), Got: got, Err: err}
	}
	if !inPlace {
		copy(dst, buf[off-lo:])
		d.stats.bounced.Add(1)
	}
	d.stats.direct.Add(1)
	return nil
}

// readErr turns a ReadAt result into nil or a *ReadError; a short read at the end of the file becomes
// io.ErrUnexpectedEOF (the header promised bytes the file no longer has).
func readErr(t Tensor, off int64, want, n int, err error) error {
	if n == want {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return &ReadError{File: t.File, Tensor: t.Name, Offset: off, Len: int64(want), Got: int64(n), Err: err}
}

// Read returns the bytes of the tensor s names in a new buffer, after checking that its dtype and shape
// are the ones s expects. It makes a *Dir usable wherever the model wants a source of tensor bytes by
// Spec; the hot path should reuse buffers with ReadInto instead.
func (d *Dir) Read(ctx context.Context, s Spec) ([]byte, error) {
	t, ok := d.Lookup(s.Name)
	if !ok {
		return nil, fmt.Errorf("%w: tensor %s: not in %s", ErrMismatch, s.Name, d.path)
	}
	if t.DType != s.DType || !slices.Equal(t.Shape, s.Shape) {
		return nil, fmt.Errorf("%w: %s", ErrMismatch, WrongTensor{Want: s, Got: t})
	}
	buf := make([]byte, t.Size)
	if err := d.ReadInto(ctx, t, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

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
