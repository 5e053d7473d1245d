package model

import (
	"errors"
	"fmt"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// carries are the token-mixing ops' carries of the layer running: the state of the sequence that crosses
// the boundary after the current slice, handed to the same op of the next slice.
type carries struct {
	conv [3]ops.Carry // the q, k and v short convolutions
	kda  ops.Carry
	mla  ops.Carry
}

func (c *carries) all() []*ops.Carry {
	return []*ops.Carry{&c.conv[0], &c.conv[1], &c.conv[2], &c.kda, &c.mla}
}

// free releases every carry still held.
func (c *carries) free(b ops.Backend) {
	for _, x := range c.all() {
		if *x != nil {
			b.Free(*x)
			*x = nil
		}
	}
}

// check verifies that the last slice closed every sequence (no carry is left).
func (c *carries) check() error {
	for _, x := range c.all() {
		if *x != nil {
			return errors.New("a carry is left after the last slice (a slicing that leaves a sequence open)")
		}
	}
	return nil
}

// shortConv is ShortConvSiLU over the current slice, carrying through c.
func (f *Pass) shortConv(x, w ops.Tensor, c *ops.Carry) (ops.Tensor, error) {
	if !f.Sliced() {
		return f.Model.Ops.ShortConvSiLU(x, w, f.Layout)
	}
	out, next, err := f.Model.Ops.(ops.Slicer).ShortConvSiLUSlice(x, w, f.cur, *c)
	return f.carried(out, next, err, c)
}

// kda is KDA over the current slice, carrying through the layer's KDA carry.
func (f *Pass) kda(q, k, v, graw, braw, aLog, dtBias ops.Tensor, heads int, lower float32) (ops.Tensor, error) {
	if !f.Sliced() {
		return f.Model.Ops.KDA(q, k, v, graw, braw, aLog, dtBias, heads, lower, f.Layout)
	}
	out, next, err := f.Model.Ops.(ops.Slicer).KDASlice(q, k, v, graw, braw, aLog, dtBias, heads, lower, f.cur, f.carries.kda)
	return f.carried(out, next, err, &f.carries.kda)
}

// mla is MLA over the current slice, carrying the open sequence's key latents.
func (f *Pass) mla(q, kv, ks, latent, kvb ops.Tensor) (ops.Tensor, error) {
	d := f.Model.Dims
	if !f.Sliced() {
		if kv == nil { // ops.LatentKeys: the backend expands the keys from the latent
			return f.Model.Ops.(ops.LatentKeys).MLALatent(q, latent, ks, kvb, d.MLAHeads, d.QKNope, d.QKShared, d.VHead, f.Layout)
		}
		return f.Model.Ops.MLA(q, kv, ks, d.MLAHeads, d.QKNope, d.QKShared, d.VHead, f.Layout)
	}
	out, next, err := f.Model.Ops.(ops.Slicer).MLASlice(q, kv, ks, latent, kvb, d.MLAHeads, d.QKNope, d.QKShared, d.VHead, f.cur, f.carries.mla)
	return f.carried(out, next, err, &f.carries.mla)
}

// carried replaces the carry in c by next once the op succeeded.
func (f *Pass) carried(out ops.Tensor, next ops.Carry, err error, c *ops.Carry) (ops.Tensor, error) {
	if err != nil {
		return nil, err
	}
	if *c != nil {
		f.Model.Ops.Free(*c)
	}
	*c = next
	return out, nil
}

// seenObs gathers what the slices of one layer (or one readout) report, so that the observer hears once,
// for every row of the wave, as from an unsliced pass. Unsliced, it passes every report on at once.
type seenObs struct {
	routing *ops.Routing
	mixes   []seenMix
}

type seenMix struct {
	site    Site
	n       int
	weights []float32
}

// wants is what the observer keeps (Wanter): both for one that does not say.
func (f *Pass) wants() (routing, mixes bool) {
	if w, ok := f.Obs.(Wanter); ok {
		return w.Wants()
	}
	return true, true
}

// keepsMixes reports whether anything reads the AttnRes mixing weights of this pass: an observer that
// keeps them (Wanter; one that does not say keeps them).
func (f *Pass) keepsMixes() bool {
	if f.Obs == nil {
		return false
	}
	_, mixes := f.wants()
	return mixes
}

// route reports a slice's routing.
func (s *seenObs) route(f *Pass, r ops.Routing) {
	if f.Obs == nil {
		return
	}
	if !f.Sliced() {
		f.Obs.Routing(f.layer, r)
		return
	}
	if s.routing == nil {
		s.routing = &ops.Routing{K: r.K}
	}
	if keep, _ := f.wants(); !keep {
		return // reported empty at the layer's end
	}
	s.routing.IDs = append(s.routing.IDs, r.IDs...)
	s.routing.Weights = append(s.routing.Weights, r.Weights...)
}

// mix reports a slice's AttnRes weights at a site.
func (s *seenObs) mix(f *Pass, site Site, weights []float32, n int) {
	if f.Obs == nil {
		return
	}
	if !f.Sliced() {
		f.Obs.Mix(f.layer, site, weights, n)
		return
	}
	if _, keep := f.wants(); !keep {
		weights = nil // reported empty at the layer's end
	}
	for i := range s.mixes {
		if s.mixes[i].site == site {
			s.mixes[i].weights = append(s.mixes[i].weights, weights...)
			return
		}
	}
	s.mixes = append(s.mixes, seenMix{site, n, append([]float32(nil), weights...)})
}

// flush passes what the slices reported on to the observer, in the order an unsliced pass reports it.
func (s *seenObs) flush(f *Pass) {
	if f.Obs != nil {
		if s.routing != nil {
			f.Obs.Routing(f.layer, *s.routing)
		}
		for _, m := range s.mixes {
			f.Obs.Mix(f.layer, m.site, m.weights, m.n)
		}
	}
	*s = seenObs{}
}

// ReadoutStats is Readout then Stats over every slice of the wave: the next-token statistics of every
// row, with targets[r] the id after row r of the wave (-1: none). Applied after the last layer it is the
// model's output; after an earlier one, the logit lens.
func (f *Pass) ReadoutStats(g *Globals, w *Wave, targets []int32, k int) ([]ops.TokenStats, error) {
	if len(targets) != w.Bounds[len(w.Bounds)-1] {
		return nil, fmt.Errorf("stats: %d targets for a wave of %d rows", len(targets), w.Bounds[len(w.Bounds)-1])
	}
	out := make([]ops.TokenStats, 0, len(targets))
	err := f.each(w, false, func(j int, st *State) error {
		h, err := f.Readout(g, st)
		if err != nil {
			return err
		}
		defer f.Model.Ops.Free(h)
		s, err := f.Stats(g, h, targets[w.Bounds[j]:w.Bounds[j+1]], k)
		out = append(out, s...)
		return err
	})
	f.seen.flush(f)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Hidden copies the running sum of every row of the wave to the host (the hidden state after the layer
// that last ran), rows x hidden.
func (f *Pass) Hidden(w *Wave) ([]float32, error) {
	var out []float32
	err := f.eachSum(w, false, func(j int, st *State) error {
		if st.P == nil {
			return fmt.Errorf("hidden state: the running sum is empty (mid-layer state)")
		}
		v, err := f.Model.Ops.ToHost(st.P)
		out = append(out, v...)
		return err
	})
	return out, err
}
