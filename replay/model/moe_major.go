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
//     the routed experts' input z; z and the shared output wait in host memory, the routing on the host;
//  2. expert chunk by expert chunk, in ascending ids: the chunk is fetched once and every slice's rows
//     that chose its experts are accumulated (z uploaded again; the float32 accumulators stay on the
//     device, one per slice), then the chunk is freed;
//  3. slice by slice: the accumulator rounded, normed, projected back and added to the shared output,
//     then to the running sum.
//
// ExpertsAccumulate on disjoint ascending expert subsets equals one call, and every other step is the
// same op on the same rows, so the results are the bits of the usual order. The price is z's upload once
// per chunk (2 x latent bytes a token) and the accumulators on the device for the whole wave (4 x latent).

// expertMajor says whether layer w runs expert-major.
func (f *Pass) expertMajor(w *LayerWeights) bool {
	return f.ExpertMajor && f.Sliced() && w.Layer.FFN == MoE
}

// spareRows returns a host buffer that an earlier expert-major layer's stash left, of t's size, for
// download to fill (none: download allocates). Reusing them spares the host a fresh allocation of every
// slice's stash in every MoE layer, whose first touch faults its pages in during the copy (run 38: a
// slice's download ran at 9 GB/s into fresh memory, 32 GB/s into touched memory).
func (f *Pass) spareRows(t ops.Tensor) hostRows {
	n := t.Rows() * t.Cols()
	for i, bf := range f.spare {
		if len(bf) == n {
			f.spare[i] = f.spare[len(f.spare)-1]
			f.spare = f.spare[:len(f.spare)-1]
			return hostRows{bf: bf}
		}
	}
	return hostRows{}
}

// majorSlice is one slice's part of an expert-major layer between its phases.
type majorSlice struct {
	routing   ops.Routing
	z, shared hostRows   // in host memory between phases 1 and 3
	acc       ops.Tensor // [rows, latent] float32 on the device, from the first chunk on
}

// layerExpertMajor runs MoE layer w over the wave in the three phases above.
func (f *Pass) layerExpertMajor(wv *Wave, w *LayerWeights) error {
	b := f.Model.Ops
	moe, ok := w.FFN.(*MoEWeights)
	if !ok {
		return fmt.Errorf("expert-major: layer %d's FFN is a %T, not MoE", w.Layer.Index, w.FFN)
	}
	parts := make([]majorSlice, wv.Slices())
	defer func() {
		for _, p := range parts {
			if p.acc != nil {
				b.Free(p.acc)
			}
			for _, bf := range [][]uint16{p.z.bf, p.shared.bf} {
				if bf != nil {
					f.spare = append(f.spare, bf) // for the next MoE layer's stash
				}
			}
		}
	}()
	// phase 1
	err := f.each(wv, true, func(j int, st *State) error {
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
		parts[j].routing = in.routing
		if parts[j].z, err = download(b, in.z, f.spareRows(in.z)); err != nil {
			return fmt.Errorf("%s: routed experts' input of slice %d to host memory: %w", w.Layer.FFN, j, err)
		}
		if parts[j].shared, err = download(b, in.shared, f.spareRows(in.shared)); err != nil {
			return fmt.Errorf("%s: shared experts' output of slice %d to host memory: %w", w.Layer.FFN, j, err)
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
	if err := moe.expertsMajor(f, parts); err != nil {
		return fmt.Errorf("%s: %w", w.Layer.FFN, err)
	}
	// phase 3: the running sum alone (the blocks were read in phase 1 and nothing banks here)
	return f.eachSum(wv, true, func(j int, st *State) error {
		shared, err := parts[j].shared.upload(b)
		if err != nil {
			return fmt.Errorf("%s: shared experts' output of slice %d: %w", w.Layer.FFN, j, err)
		}
		y, err := moe.after(f, parts[j].acc, shared)
		b.Free(shared)
		b.Free(parts[j].acc)
		parts[j].acc = nil
		if err != nil {
			return fmt.Errorf("%s: %w", w.Layer.FFN, err)
		}
		return f.accumulate(st, y)
	})
}

// expertsMajor accumulates every slice's routed experts chunk by chunk: the experts any slice chose, in
// ascending ids, ExpertChunk at a time (all at once when 0), each chunk fetched once for all slices.
func (w *MoEWeights) expertsMajor(f *Pass, parts []majorSlice) error {
	b := f.Model.Ops
	beta, linBeta := f.Model.situBetas()
	var all ops.Routing
	for _, p := range parts {
		all.K = p.routing.K
		all.IDs = append(all.IDs, p.routing.IDs...)
	}
	ids := Chosen(all)
	f.lastChosen = len(ids)
	chunk := f.ExpertChunk
	if chunk <= 0 {
		chunk = max(len(ids), 1)
	}
	for j := range parts {
		acc, err := b.Zeros(parts[j].z.rows, f.Model.Dims.Latent)
		if err != nil {
			return fmt.Errorf("expert accumulator of slice %d: %w", j, err)
		}
		parts[j].acc = acc
	}
	for start := 0; start < len(ids); start += chunk {
		if err := f.Ctx.Err(); err != nil {
			return err
		}
		part := ids[start:min(start+chunk, len(ids))]
		experts, err := f.Experts.Experts(f.Ctx, w.layer, part)
		if err != nil {
			return fmt.Errorf("experts %v: %w", part, err)
		}
		err = w.chunkAllSlices(f, parts, experts, beta, linBeta)
		for _, e := range experts {
			b.Free(e)
		}
		if err != nil {
			return fmt.Errorf("experts %v: %w", part, err)
		}
	}
	return nil
}

// chunkAllSlices accumulates one chunk of experts into every slice's accumulator.
func (w *MoEWeights) chunkAllSlices(f *Pass, parts []majorSlice, experts []ops.Expert, beta, linBeta float32) error {
	b := f.Model.Ops
	for j := range parts {
		z, err := parts[j].z.upload(b)
		if err != nil {
			return fmt.Errorf("routed experts' input of slice %d: %w", j, err)
		}
		err = b.ExpertsAccumulate(parts[j].acc, z, parts[j].routing, experts, beta, linBeta)
		b.Free(z)
		if err != nil {
			return fmt.Errorf("slice %d: %w", j, err)
		}
	}
	return nil
}
