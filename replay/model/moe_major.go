package model

import (
	"fmt"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// Expert-major MoE layers. Sliced, an MoE layer's routed experts are fetched as its first slice needs
// them and held for the others, so that none is fetched twice: the device must hold all of a layer's
// experts beside a slice (K3: 896 of 17.5 MB). A smaller device runs the layer in three phases instead:
//
//  1. slice by slice: the attention sublayer, the FFN's mix and norm, the router, the shared experts and
//     the routed experts' input z; z and the shared output wait in host memory (or on the device, where
//     the plan finds the room: Pass.StashOnDevice), the routing on the host;
//  2. expert chunk by expert chunk, in ascending ids: the chunk is fetched once and every slice's rows
//     that chose its experts are accumulated, consecutive slices pooled into one call (moe_pool.go: z
//     uploaded, or joined, once a pool and a chunk; the float32 accumulators stay on the device, one per
//     pool), then the chunk is freed;
//  3. slice by slice: the accumulator rounded, normed, projected back and added to the shared output,
//     then to the running sum; in a sweep of its own, or, folded (Pass.FoldMajor, moe_tail.go), in the
//     next sweep over the wave.
//
// ExpertsAccumulate on disjoint ascending expert subsets equals one call, and every other step is the
// same op on the same rows, so the results are the bits of the usual order. The price is z's upload once
// per chunk (2 x latent bytes a token) and the accumulators on the device for the whole wave (4 x latent).

// expertMajor says whether layer w runs expert-major.
func (f *Pass) expertMajor(w *LayerWeights) bool {
	return f.ExpertMajor && f.Sliced() && w.Layer.FFN == MoE
}

// majorLayer is an expert-major layer's rows between its phases: the wave's routing, the stashes of
// the wave's expert inputs z and shared experts' output (in host memory or on the device), and the pools
// of slices that share the expert calls (moe_pool.go).
type majorLayer struct {
	routing   *waveRouting
	z, shared *stash
	pools     []pool
}

// free releases what the layer holds on the device and hands its host buffers to the next.
func (l *majorLayer) free(f *Pass) {
	for i := range l.pools {
		f.Model.Ops.Free(l.pools[i].acc)
		l.pools[i].acc = nil
	}
	l.z.release(f)
	l.shared.release(f)
}

// layerExpertMajor runs MoE layer w over the wave in the three phases above.
func (f *Pass) layerExpertMajor(wv *Wave, w *LayerWeights) error {
	b := f.Model.Ops
	moe, ok := w.FFN.(*MoEWeights)
	if !ok {
		return fmt.Errorf("expert-major: layer %d's FFN is a %T, not MoE", w.Layer.Index, w.FFN)
	}
	d := f.Model.Dims
	l := &majorLayer{routing: newWaveRouting(wv.Bounds[wv.Slices()], d.TopK, d.Experts, wv.Slices()),
		z: f.newStash(wv.Bounds[wv.Slices()], d.Latent), shared: f.newStash(wv.Bounds[wv.Slices()], d.Hidden)}
	t := &majorTail{l: l, moe: moe, layer: w}
	defer func() {
		if f.tail != t { // the layer ran its last phase, or failed
			l.free(f)
		}
	}()
	fold := f.foldTail(w, l)
	// phase 1: the layer's last sweep when folded (its last slice starts slice 0's state on its way in
	// for the next sweep, which phase 2 does not touch)
	err := f.eachLoaded(wv, sweep{changes: true, blocks: true, ahead: fold}, func(j int, st *State) error {
		x, err := f.attnSteps(st, w)
		if err != nil {
			return err
		}
		in, err := moe.before(f, x)
		b.Free(x)
		if err != nil {
			return fmt.Errorf("%s: %w", w.Layer.FFN, err)
		}
		defer in.free(b)
		if err := l.routing.put(j, wv.Bounds[j], in.routing); err != nil {
			return fmt.Errorf("%s: %w", w.Layer.FFN, err)
		}
		if err := l.z.put(b, wv.Bounds[j], in.z); err != nil {
			return fmt.Errorf("%s: routed experts' input of slice %d to the stash: %w", w.Layer.FFN, j, err)
		}
		if l.z.keeps() {
			in.z = nil
		}
		if err := l.shared.put(b, wv.Bounds[j], in.shared); err != nil {
			return fmt.Errorf("%s: shared experts' output of slice %d to the stash: %w", w.Layer.FFN, j, err)
		}
		if l.shared.keeps() {
			in.shared = nil
		}
		return nil
	})
	if err == nil {
		err = f.carries.check()
	}
	if err != nil {
		return err
	}
	// phase 2
	if err := moe.expertsMajor(f, wv.Bounds, l); err != nil {
		return fmt.Errorf("%s: %w", w.Layer.FFN, err)
	}
	if fold { // phase 3 in the next sweep (moe_tail.go); phase 1's sweep finished any earlier layer's
		if f.tail != nil {
			return fmt.Errorf("expert-major: layer %d's last phase still pending after a sweep", f.tail.layer.Layer.Index)
		}
		l.routing = nil // the wave's routing, not read again: its host memory goes now
		for i := range l.pools {
			l.pools[i].routing, l.pools[i].pairs = ops.Routing{}, nil
		}
		f.tail = t
		return nil
	}
	// phase 3: the running sum alone (the blocks were read in phase 1 and nothing banks here), the
	// layer's last sweep
	return f.eachLoaded(wv, sweep{changes: true, ahead: true}, func(j int, st *State) error {
		if err := t.finish(f, wv.Bounds, j, st); err != nil {
			return fmt.Errorf("%s: %w", w.Layer.FFN, err)
		}
		return nil
	})
}

// expertsMajor accumulates every slice's routed experts chunk by chunk: the experts any slice chose, in
// ascending ids, ExpertChunk at a time (all at once when 0), each chunk fetched once and run over every
// pool of slices.
func (w *MoEWeights) expertsMajor(f *Pass, bounds []int, l *majorLayer) error {
	b := f.Model.Ops
	beta, linBeta := f.Model.situBetas()
	ids := l.routing.chosen()
	f.lastChosen = len(ids)
	chunk := f.ExpertChunk
	if chunk <= 0 {
		chunk = max(len(ids), 1)
	}
	l.pools = f.pools(bounds, l.routing, ids, chunk)
	for i := range l.pools {
		p := &l.pools[i]
		acc, err := b.Zeros(bounds[p.hi]-bounds[p.lo], f.Model.Dims.Latent)
		if err != nil {
			return fmt.Errorf("expert accumulator of slices %d..%d: %w", p.lo, p.hi-1, err)
		}
		p.acc = acc
	}
	z, err := l.poolInputs(b, bounds)
	if err != nil {
		return err
	}
	defer func() {
		for _, t := range z {
			if t != nil {
				b.Free(t)
			}
		}
	}()
	for start := 0; start < len(ids); start += chunk {
		if err := f.Ctx.Err(); err != nil {
			return err
		}
		part := ids[start:min(start+chunk, len(ids))]
		experts, err := f.Experts.Experts(f.Ctx, w.layer, part)
		if err != nil {
			return fmt.Errorf("experts %v: %w", part, err)
		}
		err = w.chunkAllPools(f, bounds, l, z, part, experts, beta, linBeta)
		for _, e := range experts {
			b.Free(e)
		}
		if err != nil {
			return fmt.Errorf("experts %v: %w", part, err)
		}
	}
	return nil
}

// chunkAllPools accumulates one chunk of experts (those of ids) into every pool's accumulator, in as
// many calls a pool as keep each within the plan's pairs a row (moe_calls.go). z[i] is pool i's expert
// input when it stays on the device for the whole phase (poolInputs), else nil: uploaded for the calls.
func (w *MoEWeights) chunkAllPools(f *Pass, bounds []int, l *majorLayer, z []ops.Tensor, ids []int, experts []ops.Expert, beta, linBeta float32) error {
	b := f.Model.Ops
	for i := range l.pools {
		p := &l.pools[i]
		zi := z[i]
		if zi == nil {
			var err error
			if zi, err = l.z.upload(b, bounds[p.lo], bounds[p.hi]); err != nil {
				return fmt.Errorf("routed experts' input of slices %d..%d: %w", p.lo, p.hi-1, err)
			}
		}
		err := f.expertCalls(p.acc, zi, p.routing, ids, experts, p.pairs, beta, linBeta)
		if z[i] == nil {
			b.Free(zi)
		}
		if err != nil {
			return fmt.Errorf("slices %d..%d: %w", p.lo, p.hi-1, err)
		}
	}
	return nil
}

// poolInputs returns each pool's expert input for the whole expert phase where the stash is on the
// device (joined once, not once a chunk: at 262,144 tokens seven 3.8 GB copies a layer, run 57), else
// nils (uploaded call by call: host memory holds them).
func (l *majorLayer) poolInputs(b ops.Backend, bounds []int) ([]ops.Tensor, error) {
	z := make([]ops.Tensor, len(l.pools))
	if !l.z.keeps() {
		return z, nil
	}
	for i, p := range l.pools {
		t, err := l.z.take(b, bounds[p.lo], bounds[p.hi])
		if err != nil {
			for _, done := range z[:i] {
				b.Free(done)
			}
			return nil, fmt.Errorf("routed experts' input of slices %d..%d: %w", p.lo, p.hi-1, err)
		}
		z[i] = t
	}
	return z, nil
}
