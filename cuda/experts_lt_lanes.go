package cuda

import (
	"errors"
	"fmt"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/cuda/device"
)

// The schedule of one call on the cuBLASLt expert path (experts_lt.go) over several streams.
//
// The compute stream gathers the rows and decodes each chunk of experts; the experts' GEMMs go to lanes:
// the compute stream alone (Options.ExpertStreams 1), or side streams (cuda/device/streams.go), each with its
// own bfloat16 gate/up scratch. An expert goes to the lane with the fewest rows so far in its chunk (ties: the
// lowest lane), so the choice depends on the call's row counts only, and no lane's work depends on
// another's: experts write disjoint rows of zs and h. With side streams the chunks alternate between two
// decode buffers, so the next chunk decodes while this one's GEMMs run; a buffer is decoded into again
// only after every lane finished the chunk that used it (the done events). join makes the compute stream
// wait for every lane before the combine, so the op ends after all of it; the next call's use of the same
// kept buffers is ordered after it too (on the compute stream, or on a lane that waited for it).

// ltExpertStreams is how many side streams one call's expert GEMMs are spread over by default;
// maxExpertStreams bounds Options.ExpertStreams (each lane holds its own scratch).
const (
	ltExpertStreams  = 4
	maxExpertStreams = 16
)

// expertStreamCount is the number of lanes: Options.ExpertStreams, or ltExpertStreams.
func (b *Backend) expertStreamCount() int {
	if b.opts.ExpertStreams > 0 {
		return b.opts.ExpertStreams
	}
	return ltExpertStreams
}

// ltLane is a stream the experts' GEMMs run on, with its scratch.
type ltLane struct {
	side *device.SideStream // nil: the compute stream
	gub  uint64             // gate/up output (block x 2 ffn bfloat16)
	rows int                // rows given to the lane in the current chunk
}

// ltExperts is one call's state on the cuBLASLt path.
type ltExperts struct {
	d      *groupedDev
	gu, dn *ltShape
	block  int   // rows of one GEMM pair at most
	first  []int // each expert's first gathered row
	wdec   []uint64
	lanes  []ltLane
	done   [][]uintptr // per decode buffer, an event per side lane after the last chunk that used it
	joined bool        // join ran: the compute stream waits for every lane
}

// setup finds the decode buffers (chunk experts of slot values each; sized for up to most) and the
// lanes' scratch among the kept buffers (cuda/device/kept.go): never from the pool, whose blocks the next experts'
// uploads would then wait for.
func (x *ltExperts) setup(c *opCtx, slot, chunk, most, chunks int) error {
	ns := c.b.expertStreamCount()
	var side []device.SideStream
	if ns > 1 {
		var err error
		if side, err = c.b.dv.SideStreams(ns, ltWorkspaceAlloc); err != nil {
			return err
		}
	}
	nbuf := 1
	if ns > 1 && chunks > 1 {
		nbuf = 2
	}
	x.wdec, x.done = make([]uint64, nbuf), make([][]uintptr, nbuf)
	for i := range x.wdec {
		var err error
		if x.wdec[i], err = c.b.dv.Kept(fmt.Sprintf("experts: decoded weights %d", i), 2*slot*keptSize(chunk, most)); err != nil {
			return err
		}
	}
	x.lanes = make([]ltLane, max(1, len(side)))
	ffn := x.d.ffn
	for i := range x.lanes {
		l := &x.lanes[i]
		if len(side) > 0 {
			s := side[i]
			l.side = &s
		}
		var err error
		rows := keptSize(x.block, c.b.ltBlockRows())
		if l.gub, err = c.b.dv.Kept(fmt.Sprintf("experts: lane %d gate/up", i), 2*rows*2*ffn); err != nil {
			return err
		}
	}
	return nil
}

// keptSize is n rounded up to a power of two, at most most (and at least n): kept buffers sized so grow
// a few times at most, each growth waiting for the device.
func keptSize(n, most int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return max(n, min(p, most))
}

// reuse makes the compute stream wait, before chunk ci decodes into its buffer, until every lane has
// finished the chunk that used the buffer before.
func (x *ltExperts) reuse(c *opCtx, ci int) error {
	bi := ci % len(x.wdec)
	evs := x.done[bi]
	x.done[bi] = nil
	defer c.b.dv.SyncEvents().Put(evs...)
	for _, ev := range evs {
		if err := c.b.drv.Check("cuStreamWaitEvent(expert lane)", bind.Call(c.b.drv.CuStreamWaitEvent, c.b.dv.Stream, ev, 0)); err != nil {
			return err
		}
	}
	return nil
}

// start makes every side lane wait for the compute stream's work so far (the gather, the tables and
// this chunk's decode): one event, waited for by each lane. It opens a new chunk.
func (x *ltExperts) start(c *opCtx) error {
	for i := range x.lanes {
		x.lanes[i].rows = 0
	}
	if x.lanes[0].side == nil { // the compute stream alone
		return nil
	}
	d := c.b.drv
	ev, err := c.b.dv.SyncEvents().Record(d, c.b.dv.Stream)
	if err != nil {
		return err
	}
	defer c.b.dv.SyncEvents().Put(ev) // the queued waits keep what the event captured
	for _, l := range x.lanes {
		if err := d.Check("cuStreamWaitEvent(expert lane)", bind.Call(d.CuStreamWaitEvent, l.side.Stream, ev, 0)); err != nil {
			return err
		}
	}
	return nil
}

// expert runs expert i of the call (rows gathered rows; its decoded weights at w) on the lane with the
// fewest rows in this chunk, a block of at most ltExpertRows rows at a time.
func (x *ltExperts) expert(c *opCtx, i, rows int, w uint64) error {
	l := &x.lanes[0]
	for j := range x.lanes {
		if x.lanes[j].rows < l.rows {
			l = &x.lanes[j]
		}
	}
	l.rows += rows
	c.side = l.side
	defer func() { c.side = nil }()
	for r0 := 0; r0 < rows; r0 += x.block {
		n, row := min(x.block, rows-r0), x.first[i]+r0
		if err := c.expertLtRows(x.d, x.gu, x.dn, w, l.gub, row, n); err != nil {
			return fmt.Errorf("experts on cuBLASLt: expert %d of the call (%d rows), rows %d..%d: %w", i, rows, r0, r0+n-1, err)
		}
	}
	return nil
}

// finish records, on each side lane, the end of chunk ci's work (for reuse).
func (x *ltExperts) finish(c *opCtx, ci int) error {
	bi := ci % len(x.wdec)
	for _, l := range x.lanes {
		if l.side == nil {
			continue
		}
		ev, err := c.b.dv.SyncEvents().Record(c.b.drv, l.side.Stream)
		if err != nil {
			return err
		}
		x.done[bi] = append(x.done[bi], ev)
	}
	return nil
}

// join makes the compute stream wait for every side lane and returns the events still held; a second
// join is a no-op (expertsLt joins before the combine, and again on every return, errors included).
func (x *ltExperts) join(c *opCtx) error {
	if x.joined {
		return nil
	}
	x.joined = true
	for bi, evs := range x.done {
		c.b.dv.SyncEvents().Put(evs...)
		x.done[bi] = nil
	}
	var errs []error // every lane is waited for, whatever failed before
	for _, l := range x.lanes {
		if l.side != nil {
			errs = append(errs, c.b.dv.WaitOn(c.b.dv.Stream, l.side.Stream))
		}
	}
	return errors.Join(errs...)
}
