package cuda

import (
	"errors"
	"unsafe"
)

// syncEvents are events that order one stream after a point of another (cuStreamWaitEvent), used on the
// CUDA thread. A wait captures the event's state when it is queued, so an event goes back to the free
// list as soon as the wait is queued.
type syncEvents struct {
	idle []uintptr // events free for the next point
	all  []uintptr // every event created, destroyed at release
}

// record returns an event recorded on stream s: the point every wait on it is ordered after.
func (e *syncEvents) record(d *driver, s uintptr) (uintptr, error) {
	var ev uintptr
	if n := len(e.idle); n > 0 {
		ev, e.idle = e.idle[n-1], e.idle[:n-1]
	} else {
		if err := d.check("cuEventCreate(sync)", ccall(d.cuEventCreate, uintptr(unsafe.Pointer(&ev)), cuEventDisableTiming)); err != nil {
			return 0, err
		}
		e.all = append(e.all, ev)
	}
	if err := d.check("cuEventRecord(sync)", ccall(d.cuEventRecord, ev, s)); err != nil {
		e.idle = append(e.idle, ev)
		return 0, err
	}
	return ev, nil
}

// wait orders stream s after ev's point and gives ev back.
func (e *syncEvents) wait(d *driver, s, ev uintptr) error {
	err := d.check("cuStreamWaitEvent(sync)", ccall(d.cuStreamWaitEvent, s, ev, 0))
	e.idle = append(e.idle, ev)
	return err
}

// order makes stream to wait for everything queued on stream from so far.
func (e *syncEvents) order(d *driver, to, from uintptr) error {
	ev, err := e.record(d, from)
	if err != nil {
		return err
	}
	return e.wait(d, to, ev)
}

// destroy releases every event (at release, after the streams were synchronised).
func (e *syncEvents) destroy(d *driver) error {
	var errs []error
	for _, ev := range e.all {
		errs = append(errs, d.check("cuEventDestroy(sync)", ccall(d.cuEventDestroy, ev)))
	}
	*e = syncEvents{}
	return errors.Join(errs...)
}
