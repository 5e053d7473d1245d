package cuda

import (
	"errors"
	"unsafe"
)

// eventPool hands out CUDA events for reuse: created on first need, kept in a free list once their user
// is done with them (a wait already queued on an event keeps what it captured), and destroyed at release.
// Used on the CUDA thread. flags is CU_EVENT_* for the events it creates: cuEventDisableTiming for the
// events that only order streams, 0 for timing.
type eventPool struct {
	flags uintptr
	what  string    // names the events in errors: "copy", "upload ring", "timing"
	idle  []uintptr // events free for the next use
	all   []uintptr // every event created
}

// get returns an event from the free list, or a new one.
func (p *eventPool) get(d *driver) (uintptr, error) {
	if n := len(p.idle); n > 0 {
		ev := p.idle[n-1]
		p.idle = p.idle[:n-1]
		return ev, nil
	}
	var ev uintptr
	if err := d.check("cuEventCreate("+p.what+")", ccall(d.cuEventCreate, uintptr(unsafe.Pointer(&ev)), p.flags)); err != nil {
		return 0, err
	}
	p.all = append(p.all, ev)
	return ev, nil
}

// record returns an event recorded on stream s; on an error the event goes back to the free list.
func (p *eventPool) record(d *driver, s uintptr) (uintptr, error) {
	ev, err := p.get(d)
	if err != nil {
		return 0, err
	}
	if err := d.check("cuEventRecord("+p.what+")", ccall(d.cuEventRecord, ev, s)); err != nil {
		p.idle = append(p.idle, ev)
		return 0, err
	}
	return ev, nil
}

// put gives events back to the free list.
func (p *eventPool) put(evs ...uintptr) { p.idle = append(p.idle, evs...) }

// destroy releases every event (at release, after the streams were synchronised) and empties the pool,
// keeping its flags and name.
func (p *eventPool) destroy(d *driver) error {
	var errs []error
	for _, ev := range p.all {
		errs = append(errs, d.check("cuEventDestroy("+p.what+")", ccall(d.cuEventDestroy, ev)))
	}
	p.idle, p.all = nil, nil
	return errors.Join(errs...)
}
