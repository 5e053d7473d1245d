package device

import (
	"errors"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// EventPool hands out CUDA events for reuse: created on first need, kept in a free list once their user
// is done with them (a wait already queued on an event keeps what it captured), and destroyed at release.
// Used on the CUDA thread. Flags is CU_EVENT_* for the events it creates: bind.EventDisableTiming for the
// events that only order streams, 0 for timing.
type EventPool struct {
	Flags uintptr
	What  string    // names the events in errors: "copy", "upload ring", "timing"
	idle  []uintptr // events free for the next use
	all   []uintptr // every event created
}

// Get returns an event from the free list, or a new one.
func (p *EventPool) Get(d *bind.Driver) (uintptr, error) {
	if n := len(p.idle); n > 0 {
		ev := p.idle[n-1]
		p.idle = p.idle[:n-1]
		return ev, nil
	}
	var ev uintptr
	if err := d.Check("cuEventCreate("+p.What+")", bind.Call(d.CuEventCreate, uintptr(unsafe.Pointer(&ev)), p.Flags)); err != nil {
		return 0, err
	}
	p.all = append(p.all, ev)
	return ev, nil
}

// Record returns an event recorded on stream s; on an error the event goes back to the free list.
func (p *EventPool) Record(d *bind.Driver, s uintptr) (uintptr, error) {
	ev, err := p.Get(d)
	if err != nil {
		return 0, err
	}
	if err := d.Check("cuEventRecord("+p.What+")", bind.Call(d.CuEventRecord, ev, s)); err != nil {
		p.idle = append(p.idle, ev)
		return 0, err
	}
	return ev, nil
}

// Put gives events back to the free list.
func (p *EventPool) Put(evs ...uintptr) { p.idle = append(p.idle, evs...) }

// Destroy releases every event (at release, after the streams were synchronised) and empties the pool,
// keeping its flags and name.
func (p *EventPool) Destroy(d *bind.Driver) error {
	var errs []error
	for _, ev := range p.all {
		errs = append(errs, d.Check("cuEventDestroy("+p.What+")", bind.Call(d.CuEventDestroy, ev)))
	}
	p.idle, p.all = nil, nil
	return errors.Join(errs...)
}
