package replay

import (
	"context"
	"slices"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// deviceExperts is the model.ExpertSource (and model.ExpertPrefetcher) of one device's pass in a wave
// over several devices: the experts come from the feed, read once for every device, and are uploaded by
// this device's model. x is the device's own expertReader, whose counts make the device's WaveStats (its
// reads are unused). Used by the device's pass only.
type deviceExperts struct {
	d   *deviceFeed
	x   *expertReader
	pre map[int]map[int]ops.Expert // per layer: experts fetched ahead of the router, not yet handed out
}

var _ model.ExpertPrefetcher = (*deviceExperts)(nil)

// Prefetch implements model.ExpertPrefetcher: those of ids the host cache holds are uploaded now (an
// upload from there never waits for a read) and kept for the layer's Experts calls.
func (de *deviceExperts) Prefetch(ctx context.Context, layer int, ids []int) error {
	var want []int
	for _, id := range ids {
		if _, held := de.pre[layer][id]; held {
			continue
		}
		if _, ok := de.d.f.cache.expert(layer, id); ok {
			want = append(want, id)
		}
	}
	if len(want) == 0 {
		return nil
	}
	exs, err := de.fetch(ctx, layer, want)
	if err != nil {
		return err
	}
	if de.pre == nil {
		de.pre = map[int]map[int]ops.Expert{}
	}
	if de.pre[layer] == nil {
		de.pre[layer] = map[int]ops.Expert{}
	}
	for _, ex := range exs {
		de.pre[layer][ex.ID()] = ex
	}
	return nil
}

// Unused implements model.ExpertPrefetcher: it frees the experts of layer fetched ahead and not handed
// out.
func (de *deviceExperts) Unused(layer int) {
	for _, ex := range de.pre[layer] {
		de.x.m.Ops.Free(ex)
	}
	delete(de.pre, layer)
}

// Experts implements model.ExpertSource: those of ids fetched ahead of the router, and the others
// fetched now (fetch), in the order of ids.
func (de *deviceExperts) Experts(ctx context.Context, layer int, ids []int) ([]ops.Expert, error) {
	var rest []int
	var out []ops.Expert
	for _, id := range ids {
		if ex, ok := de.pre[layer][id]; ok {
			out = append(out, ex)
			delete(de.pre[layer], id)
		} else {
			rest = append(rest, id)
		}
	}
	if len(rest) > 0 {
		exs, err := de.fetch(ctx, layer, rest)
		if err != nil {
			for _, ex := range out {
				de.x.m.Ops.Free(ex)
			}
			return nil, err
		}
		out = append(out, exs...)
	}
	slices.SortFunc(out, func(a, b ops.Expert) int { return a.ID() - b.ID() })
	return out, nil
}

// experts returns the device's expert source for a pass whose own expertReader is x.
func (d *deviceFeed) experts(x *expertReader) model.ExpertSource { return &deviceExperts{d: d, x: x} }

// fetch uploads experts ids (ascending) of layer to the device and returns them in that order. It claims
// the experts no device has asked for yet, reads them in batches (every tensor looked up first), uploads
// those of ids the host cache holds in one batch, then the others in ascending order, each as soon as its
// read (this device's or another's) is over.
func (de *deviceExperts) fetch(ctx context.Context, layer int, ids []int) ([]ops.Expert, error) {
	f, dev := de.d.f, de.d.dev
	all, mine, freed := f.claim(dev, layer, ids)
	f.releaseExperts(freed)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // a failed upload stops this device's reads; the entries they leave fail
	ts := make([][][]checkpoint.Tensor, len(mine))
	ends := map[*sharedExpert]bool{} // the last expert of each batch this call reads
	var err error
	for bi, b := range mine {
		ts[bi] = make([][]checkpoint.Tensor, len(b))
		for i, s := range b {
			for _, spec := range f.plan.ExpertTensors(layer, s.id) {
				t, lerr := lookup(f.r, spec)
				if lerr != nil && err == nil {
					err = lerr
				}
				ts[bi][i] = append(ts[bi][i], t)
			}
		}
		ends[b[len(b)-1]] = true
	}
	if err != nil {
		for _, b := range mine {
			for _, s := range b {
				s.err = err
				close(s.done)
			}
		}
		return nil, err
	}
	slots := make(chan struct{}, readsAhead)
	go f.readClaimed(ctx, layer, mine, ts, slots)
	out := make([]ops.Expert, 0, len(all))
	// The host cache's experts first, in one batch (model.LoadExperts: on the CUDA backend one copy per
	// cached buffer, not waited for), while the others are read; then the rest as their reads end.
	var hitIDs []int
	var hitSrcs []model.Source
	var hits []*sharedExpert
	for _, s := range all {
		if s.cached {
			hitIDs, hitSrcs, hits = append(hitIDs, s.id), append(hitSrcs, s.src), append(hits, s)
		}
	}
	if len(hits) > 0 {
		exs, herr := de.x.m.LoadExperts(ctx, layer, hitIDs, hitSrcs)
		if herr != nil {
			return nil, herr // the deferred cancel stops this call's reads
		}
		out = append(out, exs...)
		for _, s := range hits {
			de.uploaded(layer, s)
		}
	}
	for _, s := range all {
		if s.cached {
			continue
		}
		select {
		case <-s.done:
			err = s.err
		case <-ctx.Done():
			err = context.Cause(ctx)
		}
		if err != nil {
			break
		}
		var ex ops.Expert
		if ex, err = de.x.m.LoadExpert(ctx, layer, s.id, s.src); err != nil {
			break
		}
		out = append(out, ex)
		de.uploaded(layer, s)
		if ends[s] {
			<-slots // this batch is uploaded here: the reader may start another
		}
	}
	if err != nil {
		for _, ex := range out {
			de.x.m.Ops.Free(ex)
		}
		return nil, err
	}
	// In the order of ids (ascending), as the model asks: the cached ones were uploaded first.
	slices.SortFunc(out, func(a, b ops.Expert) int { return a.ID() - b.ID() })
	return out, nil
}

// uploaded counts expert s of layer as sent to this device and frees it when no device needs it more.
func (de *deviceExperts) uploaded(layer int, s *sharedExpert) {
	c := &de.x.counts[layer]
	c.bytes.Add(s.size)
	c.count.Add(1)
	if s.cached {
		c.cached.Add(s.size)
	}
	f := de.d.f
	f.mu.Lock()
	s.got[de.d.dev] = true
	done := f.doneExperts(s)
	f.mu.Unlock()
	f.releaseExperts(done)
}
