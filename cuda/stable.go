package cuda

import (
	"fmt"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/cuda/device"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Asynchronous expert uploads from stable host memory (ops.StableHostMemory).
//
// An upload from an ordinary pinned buffer waits for its copy before it returns, because the caller may
// reuse the buffer at once. A buffer marked stable never changes again, so UploadExpert from one only
// queues the copy on the copy stream and returns: the engine can queue a whole layer's experts while the
// layer's attention is still running on the compute stream, and the copy engine never waits for the Go
// side. The compute stream is ordered after those copies where it first touches such an expert:
// each upload records an event on the copy stream, and ExpertsAccumulate and Free make the compute
// stream wait for their experts' events (cuStreamWaitEvent: the device waits, the host does not).

var _ ops.StableHostMemory = (*Backend)(nil)

// MarkStable implements ops.StableHostMemory: buf, a whole buffer from AllocHost, will not change until
// FreeHost.
func (b *Backend) MarkStable(buf []byte) error {
	const op = "MarkStable"
	if len(buf) == 0 {
		return argErr(op, "empty buffer")
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	b.hosts.mu.Lock()
	defer b.hosts.mu.Unlock()
	if n, ok := b.hosts.m[p]; !ok || n != len(buf) || b.hosts.foreign[p] {
		return fmt.Errorf("%w: %s: %#x (%d bytes) is not a whole buffer from AllocHost", ErrArgument, op, p, len(buf))
	}
	if b.hosts.stable == nil {
		b.hosts.stable = map[uintptr]bool{}
	}
	b.hosts.stable[p] = true
	return nil
}

// stableHost reports whether every part lies inside a buffer marked stable.
func (b *Backend) stableHost(parts ...[]byte) bool {
	b.hosts.mu.Lock()
	defer b.hosts.mu.Unlock()
	for _, src := range parts {
		if len(src) == 0 {
			continue
		}
		if p, ok := b.hosts.find(src); !ok || !b.hosts.stable[p] {
			return false
		}
	}
	return true
}

// copyEvents are the events of asynchronous expert uploads: one recorded on the copy stream after each
// upload's copies, so that an ExpertsAccumulate waits for its own experts only, not for the experts queued
// after them (a whole layer may be queued at once). The copy stream runs its copies in order, so waiting
// for the latest upload among an op's experts covers the earlier ones too. Used on the CUDA thread.
type copyEvents struct {
	events device.EventPool // the events (timing off)
	seq    uint64           // asynchronous uploads queued so far
	joined uint64           // the compute stream waits for every upload up to this one
}

// destroy releases every event (at Close, on the CUDA thread).
func (ev *copyEvents) destroy(d *bind.Driver) error {
	ev.seq, ev.joined = 0, 0
	return ev.events.Destroy(d)
}

// recordUpload records an event on the copy stream after expert e's copies and numbers the upload.
func (b *Backend) recordUpload(e *Expert) error {
	ev, err := b.evs.events.Record(b.drv, b.dv.CopyStream)
	if err != nil {
		return err
	}
	b.evs.seq++
	e.ev, e.seq = ev, b.evs.seq
	return nil
}

// wait makes the compute stream wait (on the device, not the host) for upload seq, whose event is ev.
func (b *Backend) wait(ev uintptr, seq uint64) error {
	if seq <= b.evs.joined {
		return nil
	}
	if err := b.drv.Check("cuStreamWaitEvent", bind.Call(b.drv.CuStreamWaitEvent, b.dv.Stream, ev, 0)); err != nil {
		return err
	}
	b.evs.joined = seq
	return nil
}

// joinExperts orders the compute stream after the copies of es (those uploaded asynchronously): one wait,
// for the latest of them.
func (b *Backend) joinExperts(es []*Expert) error {
	var last *Expert
	for _, e := range es {
		if e.ev != 0 && (last == nil || e.seq > last.seq) {
			last = e
		}
	}
	if last == nil {
		return nil
	}
	return b.wait(last.ev, last.seq)
}

// joinExpertFree orders the compute stream, where an expert's block is freed, after its copies, and
// gives its event back (a wait already queued keeps what it captured). e may be nil.
func (b *Backend) joinExpertFree(e *Expert) error {
	if e == nil || e.ev == 0 {
		return nil
	}
	err := b.wait(e.ev, e.seq)
	if e.block == nil { // a shared block's event goes back when the block is freed
		b.evs.events.Put(e.ev)
	}
	e.ev = 0
	return err
}
