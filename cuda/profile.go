package cuda

import (
	"cmp"
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/cuda/device"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Op profiling (ops.OpProfiler): while it is on, Backend.run records a timing event on the compute stream
// before an op's closure and one after it, and keeps the pair with the op's key and the current span.
// OpProfile waits for the last event and sums the elapsed times per span and key. Everything here runs on
// the CUDA thread, so the state needs no lock; when profiling is off an op pays one bool check.

var _ ops.OpProfiler = (*Backend)(nil)

// opProfile is the profiling state of a Backend, touched only on the CUDA thread.
type opProfile struct {
	on     bool             // marks record events (spans)
	ops    bool             // and each op is timed (ProfileOps; ProfileSpans leaves it off)
	recs   []opRec          // the timed ops since ProfileOps(true) or the last OpProfile, in queue order
	labels []string         // the marks so far: an op queued after k marks belongs to span k
	marks  []uintptr        // the marks' timing events on the compute stream, one a label
	origin uintptr          // the timing event recorded when timing was turned on: span 0's start
	events device.EventPool // the timing events (flags 0)
	// lastReturn is when the last timed op's closure returned: the next op's hostGap starts there
	lastReturn time.Time
	// memSeen is the most the pool had allocated before the op profile last reset its high-water mark
	// (memStart): MemoryPeak's answer is the larger of it and the mark
	memSeen int64
}

// opRec is one timed op: its key, its two events on the compute stream and its span.
type opRec struct {
	key        string
	start, end uintptr
	span       int
	host       time.Duration // the op's host time (Backend.run), on its last record
	hostGap    time.Duration // the host's time outside ops before it (since the last op returned), on its first
	// memBefore and memHigh, on its last record: what the pool had allocated when the op began and the
	// most it had during the op (memStart, memEnd); memHigh 0: not measured
	memBefore, memHigh int64
}

// memStart begins an op's memory count: it reads what the pool has allocated now and restarts the
// pool's allocated high-water mark there (the reserved one is MemoryPeak's, left as it is), first keeping
// the mark so far in memSeen for MemoryPeak. The pool counts an allocation when the host makes it, so the
// mark read by memEnd after the op's closure holds the op's outputs and temporaries beside what was held
// before. Without a pool it reports nothing (0, 0).
func (p *opProfile) memStart(dv *device.Device) (before int64, err error) {
	if dv.Pool == 0 {
		return 0, nil
	}
	high, err := dv.PoolUsedHigh()
	if err != nil {
		return 0, err
	}
	p.memSeen = max(p.memSeen, high)
	if before, err = dv.PoolUsed(); err != nil {
		return 0, err
	}
	return before, dv.ResetPoolUsedHigh()
}

// memEnd reads the most the pool had allocated since memStart (0 without a pool).
func (p *opProfile) memEnd(dv *device.Device) (int64, error) {
	if dv.Pool == 0 {
		return 0, nil
	}
	return dv.PoolUsedHigh()
}

// profiling reports whether op timing is on: an op computes its detail (opCtx.detail) only then.
func (c *opCtx) profiling() bool { return c.b.prof.timesOps() }

// timesOps reports whether each op is timed (ProfileOps on), not only the spans between marks.
func (p *opProfile) timesOps() bool { return p.on && p.ops }

// phase ends the timed part of the op so far under its key (while op timing is on) and starts the next
// under detail: an op that first waits for the copy stream reports the wait apart from its work.
func (c *opCtx) phase(detail string) error {
	if c.profStart == 0 {
		c.detail = detail
		return nil
	}
	p, d := &c.b.prof, c.b.drv
	start := c.profStart
	c.profStart = 0
	if err := p.end(d, c.b.dv.Stream, start, c.key()); err != nil {
		return fmt.Errorf("op profile: %w", err)
	}
	c.detail = detail
	next, err := p.begin(d, c.b.dv.Stream)
	if err != nil {
		return fmt.Errorf("op profile: %w", err)
	}
	c.profStart = next
	return nil
}

// key is the op's name and, when it set one, its detail ("MatMul 12288x7168").
func (c *opCtx) key() string {
	if c.detail == "" {
		return c.op
	}
	return c.op + " " + c.detail
}

// begin records an op's start event on stream s; on an error the event goes back to the free list.
func (p *opProfile) begin(d *bind.Driver, s uintptr) (uintptr, error) { return p.events.Record(d, s) }

// end records the op's end event on stream s and keeps the pair under key; on an error both events go
// back to the free list and the op is not reported (a pair is either kept whole or dropped).
func (p *opProfile) end(d *bind.Driver, s, start uintptr, key string) error {
	ev, err := p.events.Record(d, s)
	if err != nil {
		p.events.Put(start)
		return err
	}
	p.recs = append(p.recs, opRec{key: key, start: start, end: ev, span: len(p.labels)})
	return nil
}

// clear drops the records and marks, returning their events to the free list (an event still pending
// on the stream may be recorded again: it then captures the new point).
func (p *opProfile) clear() {
	for _, r := range p.recs {
		p.events.Put(r.start, r.end)
	}
	p.events.Put(p.marks...)
	if p.origin != 0 {
		p.events.Put(p.origin)
	}
	p.recs, p.labels, p.marks, p.origin = p.recs[:0], nil, nil, 0
	p.lastReturn = time.Time{} // the next timed op has no op before it to measure its host gap from
}

// destroy releases every timing event (at release, after the streams were synchronised).
func (p *opProfile) destroy(d *bind.Driver) error {
	p.on, p.ops, p.recs, p.labels, p.marks, p.origin = false, false, nil, nil, nil, 0
	return p.events.Destroy(d)
}

// ProfileOps implements ops.OpProfiler: it turns op timing on (clearing what was recorded) or off
// (keeping it for OpProfile).
func (b *Backend) ProfileOps(on bool) error { return b.profile(on, true) }

var _ ops.SpanProfiler = (*Backend)(nil)

// ProfileSpans implements ops.SpanProfiler: ProfileOps with no op timed, only the marks' spans.
func (b *Backend) ProfileSpans(on bool) error { return b.profile(on, false) }

// profile turns timing on (clearing what was recorded) or off; timeOps says whether each op is timed.
func (b *Backend) profile(on, timeOps bool) error {
	return b.ex.Do(func() error {
		if on {
			b.prof.clear()
			origin, err := b.prof.begin(b.drv, b.dv.Stream) // where the first span starts on the device timeline
			if err != nil {
				return fmt.Errorf("op profile: %w", err)
			}
			b.prof.origin = origin
		}
		b.prof.on, b.prof.ops = on, on && timeOps
		return nil
	})
}

// ProfileMark implements ops.OpProfiler: the ops queued since the previous mark form a span labelled
// label. It does nothing while timing is off.
func (b *Backend) ProfileMark(label string) error {
	return b.ex.Do(func() error {
		if !b.prof.on {
			return nil
		}
		ev, err := b.prof.begin(b.drv, b.dv.Stream) // where the span ends on the device timeline
		if err != nil {
			return fmt.Errorf("op profile: %w", err)
		}
		b.prof.labels = append(b.prof.labels, label)
		b.prof.marks = append(b.prof.marks, ev)
		return nil
	})
}

// OpProfile implements ops.OpProfiler: it waits for the last timed op, returns the spans with the
// device time of each op key (largest first) and clears the records. Every mark gives a span, empty or
// not; the ops after the last mark give a last span "" when there are any.
func (b *Backend) OpProfile() ([]ops.OpSpan, error) {
	var spans []ops.OpSpan
	err := b.ex.Do(func() error {
		var err error
		spans, err = b.prof.collect(b.drv)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cuda: OpProfile: %w", err)
	}
	return spans, nil
}

// collect is OpProfile on the CUDA thread. The events are cleared whatever happens.
func (p *opProfile) collect(d *bind.Driver) ([]ops.OpSpan, error) {
	defer p.clear()
	n := len(p.labels)
	// One stream runs the ops and marks in order: once the last event completed, every event has.
	var last uintptr
	if len(p.marks) > 0 {
		last = p.marks[len(p.marks)-1]
	}
	if len(p.recs) > 0 {
		n = max(n, p.recs[len(p.recs)-1].span+1)
		if p.recs[len(p.recs)-1].span >= len(p.marks) { // ops after the last mark
			last = p.recs[len(p.recs)-1].end
		}
	}
	if last != 0 {
		if err := d.Check("cuEventSynchronize(profile)", bind.Call(d.CuEventSynchronize, last)); err != nil {
			return nil, err
		}
	}
	spans := make([]ops.OpSpan, n)
	index := make([]map[string]int, n) // span -> key -> index in its Ops
	for i := range spans {
		if i < len(p.labels) {
			spans[i].Label = p.labels[i]
			prev := p.origin
			if i > 0 {
				prev = p.marks[i-1]
			}
			if prev != 0 {
				var ms float32
				if err := d.Check("cuEventElapsedTime(profile mark)", bind.Call(d.CuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), prev, p.marks[i])); err != nil {
					return nil, fmt.Errorf("span %q: %w", p.labels[i], err)
				}
				spans[i].Device = float64(ms) / 1e3
			}
		}
		index[i] = map[string]int{}
	}
	for i, r := range p.recs {
		var ms, idle float32
		if err := d.Check("cuEventElapsedTime(profile)", bind.Call(d.CuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), r.start, r.end)); err != nil {
			return nil, fmt.Errorf("%s: %w", r.key, err)
		}
		// the stream's gap since the op before: one stream runs them in order, so nothing ran between
		if i > 0 {
			if err := d.Check("cuEventElapsedTime(profile gap)", bind.Call(d.CuEventElapsedTime, uintptr(unsafe.Pointer(&idle)), p.recs[i-1].end, r.start)); err != nil {
				return nil, fmt.Errorf("%s: %w", r.key, err)
			}
		}
		s := &spans[r.span]
		k, ok := index[r.span][r.key]
		if !ok {
			k = len(s.Ops)
			index[r.span][r.key] = k
			s.Ops = append(s.Ops, ops.OpTime{Op: r.key})
		}
		s.Ops[k].Calls++
		s.Ops[k].Seconds += float64(ms) / 1e3
		s.Ops[k].IdleBefore += max(float64(idle), 0) / 1e3
		s.Ops[k].Host += r.host.Seconds()
		s.Ops[k].HostGap += r.hostGap.Seconds()
		if r.memHigh > 0 {
			s.Ops[k].MemHigh = max(s.Ops[k].MemHigh, r.memHigh)
			s.Ops[k].MemOwn = max(s.Ops[k].MemOwn, r.memHigh-r.memBefore)
		}
		s.Seconds += float64(ms) / 1e3
	}
	for i := range spans {
		sortOpTimes(spans[i].Ops)
	}
	return spans, nil
}

// sortOpTimes orders op times by seconds, largest first, then by key (a stable order for equal times).
func sortOpTimes(ts []ops.OpTime) {
	slices.SortFunc(ts, func(x, y ops.OpTime) int {
		if c := cmp.Compare(y.Seconds, x.Seconds); c != 0 {
			return c
		}
		return cmp.Compare(x.Op, y.Op)
	})
}
