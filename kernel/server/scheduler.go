package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// The scheduler runs one wave at a time over replay.Engine.Run. Its policy: the jobs queued when the
// engine becomes free go together, in arrival order, up to MaxWaveTokens (a larger job runs alone), so
// that several callers share one pass over the weights; a wave stops early only when every job in it was
// cancelled. The loop knows which jobs each wave took, so it reports each job's state and per-layer
// progress exactly, and one loop over the engines of both precisions keeps to one pass over the weights
// at a time. A wave holds jobs of one precision: the precision of the oldest queued job.

// loop is the scheduler goroutine.
func (s *Server) loop() {
	defer close(s.loopDone)
	for {
		select {
		case <-s.wake:
		case <-s.stop:
			return
		}
		if s.cfg.Gather > 0 { // let requests sent together arrive, so they share the pass
			select {
			case <-time.After(s.cfg.Gather):
			case <-s.stop:
				return
			}
		}
		for {
			w := s.take()
			if w == nil {
				break
			}
			s.run(w)
		}
	}
}

// take removes the next wave's jobs from the queue and marks them running; nil when there is none. A
// wave's results, with those of earlier waves still being written (Server.held), stay within
// MaxResultBytes: a job that would pass it waits for a later wave, and the first job waits for the
// spills in flight to end (release wakes the loop) unless none is left, since no request past the
// limit was accepted (build).
func (s *Server) take() *wave {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || len(s.pending) == 0 {
		return nil
	}
	room := s.cfg.Limits.MaxResultBytes - s.held
	first := s.pending[0]
	if s.held > 0 && first.fixed+int64(first.tokens)*s.shape.TokenBytes(first.req.Options) > room {
		return nil
	}
	now := time.Now()
	s.waves++
	w := &wave{id: s.waves, prec: first.prec, started: now}
	var rest []*job
	alone := false // the wave holds a job retried alone: no other joins it
	for _, j := range s.pending {
		union := tables.UnionOptions(w.union, j.req.Options)
		bytes := w.fixed + j.fixed + int64(w.tokens+j.tokens)*s.shape.TokenBytes(union)
		if alone || j.prec != w.prec || (len(w.jobs) > 0 && (j.alone || w.tokens+j.tokens > s.cfg.Limits.MaxWaveTokens || bytes > room)) {
			rest = append(rest, j)
			continue
		}
		alone = j.alone
		w.jobs = append(w.jobs, j)
		w.reqs = append(w.reqs, j.req)
		w.tokens += j.tokens
		w.seqs += j.seqs
		w.union, w.fixed = union, w.fixed+j.fixed
		j.state, j.started, j.wave = api.StateRunning, now, w
		j.progress = replay.Progress{Layers: s.info.Layers, Tokens: w.tokens}
	}
	s.pending = rest
	s.current = w
	s.broadcast()
	return w
}

// run replays wave w and hands its results to the spill.
func (s *Server) run(w *wave) {
	ids := make([]string, len(w.jobs))
	for i, j := range w.jobs {
		ids[i] = j.id
	}
	reqs := w.reqs
	w.reqs = nil // the engine holds them; the wave need not
	s.log.Info("wave start", "wave", w.id, "precision", w.prec.String(), "jobs", ids, "sequences", w.seqs, "tokens", w.tokens)
	// The manifests say running, with the wave, so that a server started after a crash reports what the
	// job was doing (it said queued). Written beside the wave: persist orders each job's writes.
	for _, j := range w.jobs {
		s.spills.Add(1)
		go func() { defer s.spills.Done(); s.persist(j) }()
	}
	if h := s.hooks.beforeWave; h != nil {
		h(ids)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	s.mu.Lock()
	w.cancel = cancel
	if w.allCancelled() { // every job was cancelled before the wave began to read
		cancel(context.Canceled)
	}
	s.mu.Unlock()
	var (
		results [][]replay.Result
		stats   replay.WaveStats
	)
	o, err := s.engine(ctx, w.prec)
	if err == nil {
		results, stats, err = o.Engine.Run(ctx, reqs)
		if err != nil && context.Cause(ctx) != nil {
			err = context.Cause(ctx)
		}
	}
	s.finish(w, results, stats, err, ctx.Err() == nil)
}

// onProgress is every engine's per-layer report; it belongs to the wave in flight (one at a time).
func (s *Server) onProgress(p replay.Progress) {
	s.mu.Lock()
	if w := s.current; w != nil {
		for _, j := range w.jobs {
			if j.state == api.StateRunning {
				j.progress = p
			}
		}
		s.broadcast()
	}
	s.mu.Unlock()
	if h := s.hooks.afterLayer; h != nil {
		h(p)
	}
}

// finish records the end of wave w: failed jobs are marked so, the others' results are spilled in the
// background while the next wave runs, and cancelled jobs' results are dropped.
//
// A wave of several jobs that failed on its own (not cancelled: retry is true) is retried one job at a
// time, at the head of the queue: the failure may belong to one job only (its tokens routed to a damaged
// expert, which the others never read), and each job must get what it would have got alone.
func (s *Server) finish(w *wave, results [][]replay.Result, stats replay.WaveStats, err error, retry bool) {
	now := time.Now()
	var failed, again []*job
	s.mu.Lock()
	s.current = nil
	w.stats = stats
	running := 0
	for _, j := range w.jobs {
		if j.state == api.StateRunning {
			running++
		}
	}
	for i, j := range w.jobs {
		switch {
		case j.state != api.StateRunning: // cancelled during the wave
		case err != nil && retry && running > 1:
			j.state, j.wave, j.started, j.alone = api.StateQueued, nil, time.Time{}, true
			j.progress = replay.Progress{Layers: s.info.Layers}
			again = append(again, j)
		case err != nil:
			j.terminal(api.StateFailed, waveError(err, j.progress), now)
			failed = append(failed, j)
		default:
			j.progress.Layer = j.progress.Layers // a wave of an engine with no layers reports none
			share := w.share(s.shape, j)
			s.held += share
			s.spills.Add(1)
			go s.spill(j, results[i], share)
		}
	}
	s.pending = append(again, s.pending...)
	s.broadcast()
	s.mu.Unlock()
	if err != nil {
		s.log.Warn("wave failed", "wave", w.id, "err", err, "retried_alone", len(again))
	} else {
		s.log.Info("wave done", "wave", w.id, "seconds", stats.Seconds, "bytes_read", stats.BytesRead())
	}
	for _, j := range failed {
		s.persist(j)
	}
}

// waveError is the text a failed job shows: the engine's error and where the wave was. It is kept whole,
// unlike the errors of writing the results (spillFailure): an engine's error names the checkpoint's
// shard file and tensor, which the researcher needs to know what is damaged, and no path of the spill
// directory; a failed read names the model directory too, which is no secret (api.Info.ModelDir). The
// request's own limits (a sequence past the plan's memory) read as the engine says them.
func waveError(err error, p replay.Progress) string {
	if errors.Is(err, context.Canceled) {
		err = errors.New("the wave was cancelled")
	}
	if p.Layer == 0 {
		return err.Error()
	}
	return fmt.Sprintf("%v (after layer %d of %d)", err, p.Layer, p.Layers)
}

// cancel cancels job id if it is queued or running; ok false with the job's state when it is over.
// A running job shares its wave with others: the wave goes on for them and only stops when every job in
// it is cancelled, and the cancelled job's results are dropped either way.
func (s *Server) cancel(id string) (st api.JobState, ok bool, found bool) {
	s.mu.Lock()
	j := s.jobs[id]
	if j == nil {
		s.mu.Unlock()
		return "", false, false
	}
	switch j.state {
	case api.StateQueued:
		for i, p := range s.pending {
			if p == j {
				s.pending = append(s.pending[:i:i], s.pending[i+1:]...)
				break
			}
		}
	case api.StateRunning:
	default:
		st := j.state
		s.mu.Unlock()
		return st, false, true
	}
	j.terminal(api.StateCancelled, "cancelled by a client", time.Now())
	if w := j.wave; w != nil && w.cancel != nil && w.allCancelled() {
		w.cancel(context.Canceled)
	}
	s.broadcast()
	s.mu.Unlock()
	s.log.Info("job cancelled", "job", id)
	s.persist(j)
	return api.StateCancelled, true, true
}
