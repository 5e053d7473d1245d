package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// The spill directory holds one directory per job, named by its id:
//
//	SPILL/0123456789abcdef/job.json               the manifest: the job's status, rewritten atomically
//	SPILL/0123456789abcdef/result.tokens.parquet  one Parquet file per captured table (tables.WriteSetFrom)
//
// The manifest is written when the job is queued, when its wave starts, and again when it is done (after
// its tables), fails, is cancelled or has been fetched in full; so after a crash a manifest that still says queued or
// running is a job whose results were never written.

const manifestName = "job.json"

// manifestVersion is bumped when the manifest changes shape.
const manifestVersion = 1

// manifest is what job.json holds.
type manifest struct {
	Version   int           `json:"version"`
	PID       int           `json:"pid"` // the server that wrote it
	Status    api.JobStatus `json:"status"`
	FetchedAt *time.Time    `json:"fetched_at,omitempty"`
}

// jobDir is where job id's files live; id has been checked against idPattern.
func (s *Server) jobDir(id string) string { return filepath.Join(s.cfg.SpillDir, id) }

// resultSet is the path of job id's result set (tables.WriteSetFrom's): one Parquet file a table beside it.
func (s *Server) resultSet(id string) string { return filepath.Join(s.jobDir(id), "result.parquet") }

// tablePath is the Parquet file of one table of job id.
func (s *Server) tablePath(id, name string) string { return tables.TablePath(s.resultSet(id), name) }

// manifestOf snapshots j. The caller holds s.mu.
func (s *Server) manifestOf(j *job) manifest {
	st := j.status(0, s.start, s.cfg.Keep)
	st.Progress, st.QueuePosition = nil, 0
	return manifest{Version: manifestVersion, PID: os.Getpid(), Status: st, FetchedAt: timePtr(j.fetchedAt)}
}

// persist writes j's manifest as j is now. Writes of one job are ordered by j.persist, so the file
// always ends up with the latest state.
func (s *Server) persist(j *job) error {
	j.persist.Lock()
	defer j.persist.Unlock()
	s.mu.Lock()
	if j.removed {
		s.mu.Unlock()
		return nil
	}
	m := s.manifestOf(j)
	s.mu.Unlock()
	if err := s.writeManifest(j.id, m); err != nil {
		s.log.Error("writing a job manifest", "job", j.id, "err", err)
		return err
	}
	return nil
}

// writeManifest writes job id's job.json atomically: a temporary file, synced, renamed over the old one.
func (s *Server) writeManifest(id string, m manifest) error {
	dir := s.jobDir(id)
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	f, err := os.CreateTemp(dir, manifestName+".tmp*")
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	if h := s.hooks.manifestWrite; h != nil {
		err = h(f.Name())
	}
	if err == nil {
		_, err = f.Write(append(data, '\n'))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, manifestName))
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("manifest: %w", err)
	}
	return nil
}

// errDropped stops the writing of a job's results once it was cancelled or deleted.
var errDropped = errors.New("the job was cancelled or deleted while its results were written")

// errSpillShutdown is the cause with which Shutdown stops the results still being written once its time
// is up (Server.stopSpills), and the error their jobs show.
var errSpillShutdown = errors.New("the server shut down while this job's results were written; submit it again")

// spillFailure is the error a job whose results could not be written shows. The error of the writing
// names the spill directory's files (the tables package's and os's errors carry their paths), so the
// client gets spillFailure's text (jobError: the reason without paths, and on a full disk what to do)
// and the log the full error.
func spillFailure(err error) string {
	if errors.Is(err, errSpillShutdown) {
		return errSpillShutdown.Error()
	}
	return jobError("writing the results", err)
}

// spill writes a finished job's tables to Parquet, then its manifest, and only then says it is done.
// share is its part of Server.held, given back at the end. A job cancelled or deleted meanwhile stops
// at the next record batch: nothing more is built or written for it.
func (s *Server) spill(j *job, results []replay.Result, share int64) {
	defer s.spills.Done()
	defer s.release(share)
	s.mu.Lock()
	opts := tables.Options{HiddenFloat16: j.opts.Float16, Metadata: map[string]string{
		tables.MetaResultSet: j.id, tables.MetaRequestHash: j.reqHash, // tables.ProvenanceKeys, as the CLI's
		tables.MetaConfigHash: j.config, tables.MetaWeightsHash: s.info.WeightsSHA256, tables.MetaEngine: replay.Version,
		tables.MetaPrecision: j.prec.String(), tables.MetaBackend: s.info.Backend,
	}, Piece: s.piece}
	s.mu.Unlock()
	names, err := s.writeResults(j, s.resultSet(j.id), results, opts)
	j.persist.Lock()
	defer j.persist.Unlock()
	now := time.Now()
	s.mu.Lock()
	m := s.manifestOf(j)
	live, removed := j.state == api.StateRunning, j.removed
	s.mu.Unlock()
	if removed { // forgotten (DELETE) while its tables were written
		os.RemoveAll(s.jobDir(j.id))
		return
	}
	if !live {
		removeTables(s, j.id, names)
		return
	}
	if err == nil {
		m.Status.State, m.Status.Tables, m.Status.Finished = api.StateDone, names, &now
		err = s.writeManifest(j.id, m)
	}
	s.mu.Lock()
	switch {
	case j.state != api.StateRunning: // cancelled while its tables were written: drop them
		s.log.Info("results dropped", "job", j.id)
		removeTables(s, j.id, names)
	case err != nil:
		removeTables(s, j.id, names)
		j.terminal(api.StateFailed, spillFailure(err), now)
		// The full error, paths included, is for the operator; the job's error has none of them.
		if errors.Is(err, errSpillShutdown) {
			s.log.Warn("results not written: the server shut down", "job", j.id, "err", err)
		} else {
			s.log.Error("spill failed", "job", j.id, "err", err)
		}
		m = s.manifestOf(j)
	default:
		j.tables, j.fetched = names, map[string]bool{}
		j.terminal(api.StateDone, "", now)
		s.log.Info("job done", "job", j.id, "tables", names)
	}
	failed := j.state == api.StateFailed
	s.broadcast()
	s.mu.Unlock()
	if failed {
		// The manifest still says running: without this a restarted server would report a crash. The
		// disk that refused the tables may refuse the manifest too; then it does say running, and the
		// log says why.
		if err := s.writeManifest(j.id, m); err != nil {
			s.log.Error("writing the failed job's manifest: after a restart it will read as stopped while running", "job", j.id, "err", err)
		}
	}
}

// release gives back n bytes of Server.held and wakes the scheduler, which may have left a wave queued
// for them.
func (s *Server) release(n int64) {
	s.mu.Lock()
	s.held -= n
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// dropped reports whether j was cancelled or deleted, so that its results need not be written.
func (s *Server) dropped(j *job) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return j.state != api.StateRunning || j.removed
}

// writeResults writes every captured table of results as base.NAME.parquet, one set (all or none), and
// returns the names. Each table is built batch by batch as it is written (tables.NewReader into
// tables.WriteSetFrom, the batches Build would make), so that only the results and one batch are held,
// and a job dropped meanwhile stops at the next batch (errDropped), as does every job once Shutdown's
// time is up (s.spillCtx, with errSpillShutdown as the cause).
func (s *Server) writeResults(j *job, base string, results []replay.Result, opts tables.Options) ([]string, error) {
	if s.dropped(j) {
		return nil, errDropped
	}
	if err := tables.Validate(results); err != nil {
		return nil, err
	}
	var srcs []tables.TableSource
	defer func() {
		for _, src := range srcs {
			src.Reader.Release()
		}
	}()
	for _, name := range tables.Captured(results) {
		rr, err := tables.NewReader(results, name, opts)
		if err != nil {
			return nil, err
		}
		srcs = append(srcs, tables.TableSource{Name: name, Reader: &stopReader{RecordReader: rr, stop: func() error {
			if h := s.hooks.spillBatch; h != nil {
				if err := h(j.id, name); err != nil {
					return err
				}
			}
			if s.dropped(j) {
				return errDropped
			}
			return nil
		}}})
	}
	if err := os.MkdirAll(filepath.Dir(base), 0o700); err != nil {
		return nil, err
	}
	if _, err := tables.WriteSetFrom(s.spillCtx, base, srcs); err != nil {
		if s.dropped(j) {
			return nil, errDropped
		}
		return nil, err
	}
	names := make([]string, len(srcs))
	for i, src := range srcs {
		names[i] = src.Name
	}
	return names, nil
}

// stopReader is a RecordReader that ends before its next batch with the error stop returns: errDropped
// once the job was dropped (or a test's injected write error).
type stopReader struct {
	array.RecordReader
	stop func() error
	err  error
}

// Next builds the next batch unless stop says the job was dropped.
func (r *stopReader) Next() bool {
	if r.err == nil {
		r.err = r.stop()
	}
	return r.err == nil && r.RecordReader.Next()
}

// Err is stop's error, or the reader's own.
func (r *stopReader) Err() error {
	if r.err != nil {
		return r.err
	}
	return r.RecordReader.Err()
}

// removeTables deletes the table files of job id (the manifest stays, for its status).
func removeTables(s *Server, id string, names []string) {
	for _, name := range names {
		os.Remove(s.tablePath(id, name))
	}
}

// recover finds the jobs an earlier server left in the spill directory. Done jobs can be fetched again;
// jobs it left queued or running are marked failed, since their waves died with it.
func (s *Server) recover() error {
	entries, err := os.ReadDir(s.cfg.SpillDir)
	if err != nil {
		return fmt.Errorf("server: spill directory: %w", err)
	}
	now := time.Now()
	for _, e := range entries {
		if !e.IsDir() || !idPattern.MatchString(e.Name()) {
			continue
		}
		dir := filepath.Join(s.cfg.SpillDir, e.Name())
		m, err := readManifest(dir)
		if errors.Is(err, fs.ErrNotExist) { // a crash between the directory and its first manifest
			os.RemoveAll(dir)
			continue
		}
		if err != nil {
			s.log.Warn("skipping a spilled job", "dir", dir, "err", err)
			continue
		}
		j := jobOf(m)
		switch {
		case j.state == api.StateQueued || j.state == api.StateRunning:
			// killed while it wrote its tables, the server left them in a staging directory; nothing
			// writes this job's set again, so nothing else would clear it before the job expires
			tables.SweepSet(s.resultSet(j.id))
			j.terminal(api.StateFailed, fmt.Sprintf("the server (pid %d) stopped while this job was %s; "+
				"its results were never written: submit it again", m.PID, j.state), now)
		case j.state == api.StateDone:
			for _, name := range j.tables {
				if _, err := os.Stat(s.tablePath(j.id, name)); err != nil {
					j.terminal(api.StateFailed, fmt.Sprintf("table %s is missing from the spill directory", name), now)
					break
				}
			}
		}
		s.jobs[j.id] = j
		if j.state != m.Status.State {
			s.persist(j)
		}
	}
	if len(s.jobs) > 0 {
		s.log.Info("found spilled jobs", "jobs", len(s.jobs))
	}
	return nil
}

// readManifest reads dir/job.json.
func readManifest(dir string) (manifest, error) {
	var m manifest
	data, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("manifest %s: %w", dir, err)
	}
	if m.Version != manifestVersion || !idPattern.MatchString(m.Status.ID) || m.Status.ID != filepath.Base(dir) {
		return m, fmt.Errorf("manifest %s: version %d, id %q: not one this server wrote", dir, m.Version, m.Status.ID)
	}
	return m, nil
}

// jobOf rebuilds a job from its manifest.
func jobOf(m manifest) *job {
	st := m.Status
	prec, _ := ops.ParsePrecision(st.Precision)
	j := &job{id: st.ID, label: st.Label, prec: prec, opts: st.Options, seqs: st.Sequences, tokens: st.Tokens,
		state: st.State, errMsg: st.Error, created: st.Created, tables: st.Tables, config: st.ConfigSHA256,
		waveRec: st.Wave, fetched: map[string]bool{}}
	if st.Started != nil {
		j.started = *st.Started
	}
	if st.Finished != nil {
		j.finished = *st.Finished
	}
	if m.FetchedAt != nil {
		j.fetchedAt = *m.FetchedAt
	}
	for _, name := range st.Fetched {
		j.fetched[name] = true
	}
	return j
}
