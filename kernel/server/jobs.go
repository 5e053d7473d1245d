package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// idPattern is the shape of a job id. Ids are random, so one client cannot guess another's, and their
// shape is checked before an id becomes part of a spill path.
var idPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

// newID returns a fresh random job id.
func newID() string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b[:])
}

// job is one submitted request. Its fields are guarded by Server.mu, except req and results, which only
// the scheduler and the job's spill touch, and persist, which orders the writes of its manifest.
type job struct {
	id        string
	label     string
	prec      ops.Precision
	opts      api.Options
	seqs      int
	tokens    int
	req       replay.Request // dropped once the wave is over
	reqHash   string         // req.Hash(), for the tables' potato.request_hash
	state     api.JobState
	errMsg    string
	created   time.Time
	started   time.Time
	finished  time.Time
	wave      *wave
	waveRec   *api.Wave       // the wave as a manifest recorded it, for jobs found again after a restart
	progress  replay.Progress // the wave's last report while running
	tables    []string
	sent      map[string]bool // tables whose stream this server wrote to a client to its end
	fetched   map[string]bool // tables a client confirmed it read to their end (received)
	fetchedAt time.Time       // when every table had been fetched once: the Keep period starts
	config    string          // config hash of the engine that ran it
	removed   bool            // results deleted: nothing may write its directory again
	alone     bool            // its shared wave failed: it is retried in a wave of its own (Server.finish)
	// fixed is the estimate of what its results hold until spilled beside their per-token part: its
	// sequences, its tables' batch and the Parquet writer (tables.Shape.InputBytes, Estimate.Tables and
	// Estimate.Transient). The per-token part depends on the wave's options (wave.share).
	fixed int64

	persist sync.Mutex // held while the manifest is snapshotted and written, so writes land in order
}

// wave is one pass of several jobs over the weights.
type wave struct {
	id      int64
	prec    ops.Precision
	jobs    []*job
	reqs    []replay.Request // the jobs' requests, taken with them (a cancel may clear a job's own)
	tokens  int
	seqs    int
	started time.Time
	cancel  context.CancelCauseFunc // set once the wave runs
	stats   replay.WaveStats        // once it finished
	// union is what the wave computes for every token: the union of its jobs' options, which their
	// results hold (tables.UnionOptions); fixed the sum of its jobs' fixed parts.
	union replay.Options
	fixed int64
}

// share is j's part of the estimate of w's results until spilled: its fixed part and its tokens under
// the wave's options.
func (w *wave) share(shape tables.Shape, j *job) int64 {
	return j.fixed + int64(j.tokens)*shape.TokenBytes(w.union)
}

// terminal marks j finished in state st with msg as its error text. The caller holds Server.mu.
func (j *job) terminal(st api.JobState, msg string, now time.Time) {
	j.state, j.errMsg, j.finished = st, msg, now
	j.req = replay.Request{}
}

// expires is when j is removed: Keep after its results were all fetched, or after it failed or was
// cancelled; zero while its results wait to be fetched.
func (j *job) expires(keep time.Duration) time.Time {
	switch j.state {
	case api.StateDone:
		if !j.fetchedAt.IsZero() {
			return j.fetchedAt.Add(keep)
		}
	case api.StateFailed, api.StateCancelled:
		return j.finished.Add(keep)
	}
	return time.Time{}
}

// status is j's JobStatus. The caller holds Server.mu; pos is its queue position (0 when not queued).
func (j *job) status(pos int, serverStart time.Time, keep time.Duration) api.JobStatus {
	st := api.JobStatus{
		ID: j.id, State: j.state, Label: j.label, Created: j.created, Sequences: j.seqs, Tokens: j.tokens,
		Precision: j.prec.String(), Options: j.opts, QueuePosition: pos, Tables: j.tables,
		ConfigSHA256: j.config, Error: j.errMsg,
	}
	st.Started, st.Finished = timePtr(j.started), timePtr(j.finished)
	st.Expires = timePtr(j.expires(keep))
	for _, name := range j.tables {
		if j.fetched[name] {
			st.Fetched = append(st.Fetched, name)
		}
	}
	switch {
	case j.wave != nil:
		st.Wave = j.wave.info(serverStart)
	case j.waveRec != nil:
		st.Wave = j.waveRec
	}
	p := j.progressReport(pos)
	st.Progress = &p
	return st
}

// progressReport is j's Progress. The caller holds Server.mu.
func (j *job) progressReport(pos int) api.Progress {
	p := api.Progress{ID: j.id, State: j.state, QueuePosition: pos, Layers: j.progress.Layers, Tokens: j.tokens,
		Error: j.errMsg}
	if j.wave == nil {
		return p
	}
	r := j.progress
	p.Wave, p.Tokens = j.wave.id, j.wave.tokens
	p.Layer, p.Layers, p.BytesRead = r.Layer, r.Layers, r.BytesRead
	p.ElapsedSeconds, p.ETASeconds, p.Plan = r.Seconds, r.ETASeconds, r.Plan
	if r.Seconds > 0 {
		p.BytesPerSecond = float64(r.BytesRead) / r.Seconds
	}
	if j.state.Terminal() {
		p.ETASeconds = 0
	}
	return p
}

// info describes w for a JobStatus. The caller holds Server.mu.
func (w *wave) info(serverStart time.Time) *api.Wave {
	ids := make([]string, len(w.jobs))
	for i, j := range w.jobs {
		ids[i] = j.id
	}
	return &api.Wave{ID: w.id, Server: serverStart, Jobs: ids, Sequences: w.seqs, Tokens: w.tokens,
		BytesRead: w.stats.BytesRead(), Seconds: w.stats.Seconds}
}

// allCancelled reports whether every job of w was cancelled, so the wave itself can stop. The caller
// holds Server.mu.
func (w *wave) allCancelled() bool {
	return !slices.ContainsFunc(w.jobs, func(j *job) bool { return j.state != api.StateCancelled })
}

// timePtr is &t, or nil for the zero time (so that JSON leaves it out).
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
