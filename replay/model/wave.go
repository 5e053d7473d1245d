package model

import (
	"errors"
	"fmt"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// Wave is a wave's per-token state between layers, slice by slice: slice j holds rows Bounds[j] ..
// Bounds[j+1]-1 of the wave (the running sum and the AttnRes blocks, K3_SPEC.md 5.1). Each slice's state
// stays on the backend, or, for the slices with host state, lives in host memory between its uses and is
// uploaded for each layer (the values are bfloat16 in BF16 precision, kept as such: 2 bytes a value).
type Wave struct {
	Bounds []int
	dev    []*State     // per slice, on the backend (nil while on the host)
	host   []*hostState // per slice with host state (nil: on the device); nil: every slice on the device
	// per slice with host state, its state on its way to the backend while the slice before it computes
	// (state_prefetch.go); nil when none is
	pre  []*pendingState
	bufs *hostBufs // the host memory of host state (the pass's)
}

// hostState is one slice's state in host memory.
type hostState struct {
	blocks []hostRows
	p      hostRows // empty only right after a bank, which never outlives a layer
}

// hostRows are rows x cols values in host memory: bfloat16 bits where every value is one, else float32.
type hostRows struct {
	rows, cols int
	bf         []uint16
	f          []float32
}

// download copies t to the host. In BF16 precision on a backend with ops.BF16Transfer the values cross
// as bfloat16 bits, queued where the backend can (into reuse's buffer when it has t's size: a slice's
// running sum replaces the last one; else into one from bufs); otherwise as float32, kept as bfloat16
// bits where every value is one.
func download(b ops.Backend, t ops.Tensor, reuse hostRows, bufs *hostBufs) (hostRows, error) {
	h := hostRows{rows: t.Rows(), cols: t.Cols()}
	if m, ok := b.(ops.BF16Transfer); ok && b.Precision() == ops.BF16 {
		h.bf = reuse.bf
		if len(h.bf) != h.rows*h.cols {
			bufs.put(h.bf)
			h.bf = bufs.get(h.rows * h.cols)
		}
		if err := toHostBF16(m, t, h.bf); err != nil {
			bufs.put(h.bf)
			return hostRows{}, err
		}
		return h, nil
	}
	v, err := b.ToHost(t)
	if err != nil {
		return hostRows{}, err
	}
	if bf, ok := toBF16Bits(v); ok {
		h.bf = bf
	} else { // not all bfloat16 values (FP32 precision): keep float32
		h.f = v
	}
	return h, nil
}

// upload makes a backend tensor of h's values (FromHost rounds; they are already rounded, so the bits
// are the ones downloaded).
func (h hostRows) upload(b ops.Backend) (ops.Tensor, error) {
	if m, ok := b.(ops.BF16Transfer); ok && h.bf != nil && b.Precision() == ops.BF16 {
		return fromHostBF16(m, h.rows, h.cols, h.bf)
	}
	v := h.f
	if v == nil {
		v = fromBF16Bits(h.bf)
	}
	return b.FromHost(h.rows, h.cols, v)
}

// bytes is the host memory h holds.
func (h hostRows) bytes() int64 { return 2*int64(len(h.bf)) + 4*int64(len(h.f)) }

// Slices is the number of slices.
func (w *Wave) Slices() int { return len(w.Bounds) - 1 }

// HostBytes is the host memory the wave's state holds.
func (w *Wave) HostBytes() int64 {
	var n int64
	for _, h := range w.host {
		if h == nil {
			continue
		}
		n += h.p.bytes()
		for _, b := range h.blocks {
			n += b.bytes()
		}
	}
	return n
}

// loadState brings slice j's state to the backend: a slice in host memory uploads its running sum, and
// its blocks too when blocks is set. Without them (a step that reads and changes the running sum alone:
// an expert-major layer's last phase, a hidden-state capture) the blocks stay in host memory: at K3's
// depth a slice holds up to 8 beside p, so that is up to 9 times less traffic.
func (w *Wave) loadState(b ops.Backend, j int, blocks bool) (*State, error) {
	if w.dev[j] != nil {
		return w.dev[j], nil
	}
	if ps := w.pre[j]; ps != nil {
		w.pre[j] = nil
		if ps.withBlocks || !blocks { // all this load needs is on its way
			st, err := ps.take(b)
			if err != nil {
				return nil, fmt.Errorf("state of slice %d: %w", j, err)
			}
			if !blocks { // a sum-only sweep after a layer's (a hidden-state capture): the blocks go
				for _, t := range st.Blocks {
					b.Free(t)
				}
				st.Blocks = nil
			}
			w.dev[j] = st
			return st, nil
		}
		if err := ps.drop(); err != nil { // the sum alone on its way where the blocks are wanted too
			return nil, fmt.Errorf("state of slice %d: %w", j, err)
		}
	}
	h := w.host[j]
	st := &State{}
	var up []hostRows
	if blocks {
		up = h.blocks
	}
	for _, hb := range up {
		t, err := hb.upload(b)
		if err != nil {
			st.Free(b)
			return nil, fmt.Errorf("state of slice %d: %w", j, err)
		}
		st.Blocks = append(st.Blocks, t)
	}
	if h.p.rows > 0 {
		t, err := h.p.upload(b)
		if err != nil {
			st.Free(b)
			return nil, fmt.Errorf("state of slice %d: %w", j, err)
		}
		st.P = t
	}
	w.dev[j] = st
	return st, nil
}

// put ends slice j's use: with host state its tensors are freed, after going back to the host when the
// use changed them (only the running sum and blocks banked since the last download: banked blocks never
// change; a readout changes nothing, so its slices' host copies stay as they are).
func (w *Wave) put(b ops.Backend, j int, changed bool) error {
	if w.host == nil || w.host[j] == nil || w.dev[j] == nil { // on the device between layers
		return nil
	}
	st, h := w.dev[j], w.host[j]
	w.dev[j] = nil
	defer st.Free(b)
	if !changed {
		return nil
	}
	for i := len(h.blocks); i < len(st.Blocks); i++ {
		hb, err := download(b, st.Blocks[i], hostRows{}, w.bufs)
		if err != nil {
			return fmt.Errorf("state of slice %d: block %d: %w", j, i, err)
		}
		h.blocks = append(h.blocks, hb)
	}
	last := h.p
	h.p = hostRows{}
	if st.P == nil {
		w.bufs.put(last.bf)
		return nil
	}
	p, err := download(b, st.P, last, w.bufs)
	if err != nil {
		return fmt.Errorf("state of slice %d: running sum: %w", j, err)
	}
	h.p = p
	return nil
}

// Free releases the wave's state.
func (w *Wave) Free(b ops.Backend) {
	_ = w.dropPending() // its error is the device's, which the next op reports
	for j, st := range w.dev {
		if st != nil {
			st.Free(b)
			w.dev[j] = nil
		}
	}
	for _, h := range w.host { // the buffers back to the pass, for its Close
		if h == nil {
			continue
		}
		w.bufs.put(h.p.bf)
		for _, hb := range h.blocks {
			w.bufs.put(hb.bf)
		}
	}
	w.host = nil
}

// each runs fn on every slice's state in order, uploading host state before it and putting it back
// after (downloaded again only when fn changes it): fn gets the slice index and its state on the backend.
func (f *Pass) each(w *Wave, changes bool, fn func(j int, st *State) error) error {
	return f.eachLoaded(w, sweep{changes: changes, blocks: true}, fn)
}

// eachSum is each for a step that reads and changes the running sum alone (loadState without blocks):
// a slice in host memory gives fn a state without its blocks, which stay in host memory as they are. fn
// must not bank.
func (f *Pass) eachSum(w *Wave, changes bool, fn func(j int, st *State) error) error {
	return f.eachLoaded(w, sweep{changes: changes}, fn)
}

// sweep is how eachLoaded goes over a wave's slices.
type sweep struct {
	changes bool // fn changes the state: it goes back to host memory after fn
	blocks  bool // the blocks come to the backend with the running sum (each), else not (eachSum)
	// ahead: a layer's last sweep, which the next layer's or the readout's follows (a hidden-state
	// capture between takes the running sum of what is on its way: loadState): in its last slice the
	// first slice's whole state starts on its way in for that sweep
	ahead bool
}

// eachLoaded runs fn on every slice's state as loadState brings it to the backend, the next slice's
// started on its way before fn queues this one's work (state_prefetch.go).
func (f *Pass) eachLoaded(w *Wave, sw sweep, fn func(j int, st *State) error) (err error) {
	b := f.Model.Ops
	defer func() {
		if err != nil {
			err = errors.Join(err, w.dropPending())
		}
	}()
	n := w.Slices()
	for j := range n {
		if err := f.Ctx.Err(); err != nil {
			return err
		}
		st, err := w.loadState(b, j, sw.blocks)
		if err != nil {
			return err
		}
		next, blocks := j+1, sw.blocks
		if next == n && sw.ahead {
			next, blocks = 0, true // slice 0's put is behind: its state is this layer's output
		}
		if err := w.prefetch(b, next, blocks); err != nil {
			return errors.Join(err, w.put(b, j, false))
		}
		f.cur, f.curIndex = f.slices[j], j
		changed, err := f.finishTail(w, j, st) // a folded layer's last phase first (moe_tail.go)
		if err == nil {
			err = fn(j, st)
		}
		if perr := w.put(b, j, sw.changes || changed); err == nil {
			err = perr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
