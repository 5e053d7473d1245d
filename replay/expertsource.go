package replay

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// expertBatch is how many experts one ReadBatch reads: enough tensors to keep the checkpoint reader's
// parallel preads busy (16 experts of K3 are 96 tensors, 280 MB), few enough that uploading one batch
// overlaps reading the next and the host memory stays small.
const expertBatch = 16

// expertReader implements model.ExpertSource on a Reader: it reads the chosen experts' MXFP4 tensors in
// batches into arenas of the pool, several batches at once (readsAhead), uploads each batch as soon as
// it is read while the next ones are, and counts the bytes.
type expertReader struct {
	r     Reader
	m     *model.Model
	pool  *hostPool
	cache *hostCache    // experts kept in host memory across waves; nil: none
	held  *atomic.Int64 // the engine's count of host bytes in use for layers
	// counts, per layer, of the experts sent to the backend, those fetched ahead of the router included.
	counts []expertCounts
	// pre holds, per layer, experts fetched ahead of the router (Prefetch) and not yet handed out.
	pre map[int]map[int]ops.Expert
	// ahead reads a large wave's experts from the checkpoint before the router (readahead.go); nil: off.
	ahead *expertAhead
}

// expertCounts are one layer's expert traffic.
type expertCounts struct {
	bytes  atomic.Int64 // expert bytes sent to the backend (read, or from the host cache)
	count  atomic.Int64 // experts sent to the backend
	cached atomic.Int64 // of bytes, those served from the host cache
}

// Prefetch implements model.ExpertPrefetcher: it uploads those of ids the host cache holds and that are
// not held already (an upload from there never waits for the disk; on the CUDA backend it does not even
// wait for its copy) and keeps them for the Experts calls of the layer.
func (x *expertReader) Prefetch(ctx context.Context, layer int, ids []int) error {
	if x.pre == nil {
		x.pre = map[int]map[int]ops.Expert{}
	}
	held := x.pre[layer]
	if held == nil {
		held = map[int]ops.Expert{}
		x.pre[layer] = held
	}
	var hits []int
	var srcs []model.Source
	for _, e := range ids {
		if _, done := held[e]; done {
			continue
		}
		if src, ok := x.cache.expert(layer, e); ok {
			hits, srcs = append(hits, e), append(srcs, src)
		}
	}
	exs, err := x.uploadCached(ctx, layer, hits, srcs)
	if err != nil {
		return err
	}
	for _, ex := range exs {
		held[ex.ID()] = ex
	}
	return nil
}

// Unused implements model.ExpertPrefetcher: it frees the experts of layer fetched ahead and not handed
// out, and the host buffers of those read ahead from the checkpoint.
func (x *expertReader) Unused(layer int) {
	for _, ex := range x.pre[layer] {
		x.m.Ops.Free(ex)
	}
	delete(x.pre, layer)
	x.ahead.drop(layer)
}

// unusedAll frees every expert fetched ahead and not handed out (at the end of a wave, however it ended).
func (x *expertReader) unusedAll() {
	for layer := range x.pre {
		x.Unused(layer)
	}
}

// uploadCached uploads experts ids of layer from the host cache (srcs, their tensors) in one batch and
// counts them.
func (x *expertReader) uploadCached(ctx context.Context, layer int, ids []int, srcs []model.Source) ([]ops.Expert, error) {
	exs, err := x.m.LoadExperts(ctx, layer, ids, srcs)
	if err != nil {
		return nil, err
	}
	for _, s := range srcs {
		n := s.(mapSource).size()
		x.counts[layer].bytes.Add(n)
		x.counts[layer].cached.Add(n)
	}
	x.counts[layer].count.Add(int64(len(ids)))
	return exs, nil
}

// readsAhead is how many batches may be read while one is uploaded. One ReadBatch at a time leaves the
// reader's workers idle while its last segments finish; overlapping batches keeps them busy. Each batch
// holds an arena, so this also bounds the host memory: readsAhead+2 batches at most.
const readsAhead = 2

// expertRead is one batch of experts read into an arena. done is closed when the read is over; err and
// the bytes may be looked at only after that.
type expertRead struct {
	ids   []int
	srcs  []mapSource // per expert: its tensors' bytes inside arena
	arena []byte
	size  int64
	done  chan struct{}
	err   error
}

// Experts implements model.ExpertSource. Experts the read-ahead holds or is reading are uploaded from
// its buffers first, then those the host cache holds, while a goroutine reads the others batch after
// batch (every tensor looked up before anything is read); each batch is uploaded as soon as it is read,
// in ascending order.
func (x *expertReader) Experts(ctx context.Context, layer int, all []int) ([]ops.Expert, error) {
	var ids []int // those to read
	hits := map[int]mapSource{}
	out := make([]ops.Expert, 0, len(all))
	for _, e := range all {
		if ex, ok := x.pre[layer][e]; ok { // fetched ahead of the router
			out = append(out, ex)
			delete(x.pre[layer], e)
		} else if src, ok := x.cache.expert(layer, e); ok {
			hits[e] = src
		} else {
			ids = append(ids, e)
		}
	}
	ahead, ids := x.ahead.claim(layer, ids) // the read-ahead no longer reads what it has not started
	specs := make([][]checkpoint.Spec, len(ids))
	ts := make([][]checkpoint.Tensor, len(ids))
	for i, e := range ids {
		specs[i] = x.m.Plan.ExpertTensors(layer, e)
		for _, s := range specs[i] {
			t, err := lookup(x.r, s)
			if err != nil {
				for _, done := range out { // taken from those fetched ahead
					x.m.Ops.Free(done)
				}
				x.ahead.handBack(ahead)
				return nil, err
			}
			ts[i] = append(ts[i], t)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reads := make(chan *expertRead, readsAhead)
	go x.readBatches(ctx, &x.counts[layer], ids, specs, ts, reads)
	// Uploads run on this goroutine: backends do not promise concurrent uploads.
	err := x.upload(ctx, layer, ahead, &out)
	if err != nil {
		cancel()
	}
	var hitIDs []int
	var hitSrcs []model.Source
	for _, e := range all {
		if src, ok := hits[e]; ok {
			hitIDs, hitSrcs = append(hitIDs, e), append(hitSrcs, src)
		}
	}
	if err == nil { // else the reads below stop at once
		if exs, herr := x.uploadCached(ctx, layer, hitIDs, hitSrcs); herr != nil {
			err = herr
			cancel()
		} else {
			out = append(out, exs...)
		}
	}
	for rd := range reads { // drained to the end: every arena goes back to the pool or to the cache
		<-rd.done
		if err == nil {
			err = rd.err
		}
		for i := 0; err == nil && i < len(rd.ids); i++ {
			var ex ops.Expert
			if ex, err = x.m.LoadExpert(ctx, layer, rd.ids[i], rd.srcs[i]); err == nil {
				out = append(out, ex)
			}
		}
		x.held.Add(-rd.size)
		if err == nil && x.cache.keepExperts(x.pool, layer, rd.ids, rd.srcs, rd.arena) {
			x.pool.disown(rd.arena)
		} else {
			x.pool.put(rd.arena)
		}
		if err != nil {
			cancel()
		}
	}
	if err == nil && len(out) < len(all) { // the reader stopped early: only a cancelled context does that
		err = fmt.Errorf("experts of layer %d: %w", layer, context.Cause(ctx))
	}
	if err != nil {
		for _, done := range out {
			x.m.Ops.Free(done)
		}
		return nil, err
	}
	// In the order of ids (ascending): prefetched, cached and read experts were uploaded in that order.
	slices.SortFunc(out, func(a, b ops.Expert) int { return a.ID() - b.ID() })
	return out, nil
}

// readBatches starts the read of each batch of expertBatch experts in its own arena and goroutine and
// sends the batch at once, in order: sending blocks while readsAhead batches wait for their upload, which
// bounds the reads in flight. It stops at an arena it cannot get (sent with its error) or when ctx is
// cancelled (the consumer cancels it at its first failure), and closes out when done.
func (x *expertReader) readBatches(ctx context.Context, counts *expertCounts, ids []int, specs [][]checkpoint.Spec, ts [][]checkpoint.Tensor, out chan<- *expertRead) {
	defer close(out)
	for start := 0; start < len(ids); start += expertBatch {
		end := min(start+expertBatch, len(ids))
		rd := &expertRead{ids: ids[start:end], srcs: make([]mapSource, end-start), done: make(chan struct{})}
		if rd.err = ctx.Err(); rd.err != nil {
			close(rd.done)
			out <- rd
			return
		}
		var flat []checkpoint.Tensor
		for i := start; i < end; i++ {
			flat = append(flat, ts[i]...)
		}
		l := layout(flat)
		if rd.arena, rd.err = x.pool.get(l.size); rd.err != nil {
			close(rd.done)
			out <- rd
			return
		}
		reqs := make([]checkpoint.ReadRequest, len(flat))
		k := 0
		for i := start; i < end; i++ {
			src := make(mapSource, len(specs[i]))
			for _, s := range specs[i] {
				buf := l.slice(rd.arena, flat, k)
				src[s.Name] = buf
				reqs[k] = checkpoint.ReadRequest{Tensor: flat[k], Dst: buf}
				rd.size += flat[k].Size
				k++
			}
			rd.srcs[i-start] = src
		}
		x.held.Add(rd.size)
		go func() {
			defer close(rd.done)
			if rd.err = x.r.ReadBatch(ctx, reqs); rd.err == nil {
				rd.err = checkScales(reqs)
			}
			if rd.err == nil {
				counts.bytes.Add(rd.size)
				counts.count.Add(int64(len(rd.ids)))
			}
		}()
		out <- rd
	}
}

// checkScales refuses an MXFP4 scale tensor (U8, named *weight_scale) holding the E8M0 byte 255, which is
// NaN (OCP MX spec), naming the shard file, the tensor, and the row and group. The backends refuse it
// too when they decode, but they know only the matrix; this runs in the read goroutine, off the upload.
func checkScales(reqs []checkpoint.ReadRequest) error {
	for _, r := range reqs {
		t := r.Tensor
		if t.DType != checkpoint.U8 || len(t.Shape) != 2 || !strings.HasSuffix(t.Name, "weight_scale") {
			continue
		}
		if k := bytes.IndexByte(r.Dst, 255); k >= 0 {
			return &checkpoint.FileError{File: t.File, Tensor: t.Name, Kind: checkpoint.ErrMXFP4,
				Msg: fmt.Sprintf("scale byte %d (row %d, group %d) is 255, the E8M0 NaN: a damaged checkpoint",
					k, int64(k)/t.Shape[1], int64(k)%t.Shape[1])}
		}
	}
	return nil
}
