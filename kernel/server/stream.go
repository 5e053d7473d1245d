package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"slices"
	"strings"

	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// handleProgress streams j's progress as newline-delimited JSON: a line at once, one per change (every
// layer of its wave), and a last line in a terminal state, after which the stream ends. A client that
// drops the stream changes nothing for the job.
func (s *Server) handleProgress(w http.ResponseWriter, r *http.Request, j *job) {
	w.Header().Set("Content-Type", api.ContentTypeNDJSON)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // a proxy must not hold the lines back
	flush := func() {}
	if f, ok := w.(http.Flusher); ok {
		flush = f.Flush
	}
	enc := json.NewEncoder(w)
	var last api.Progress
	for first := true; ; first = false {
		s.mu.Lock()
		p := j.progressReport(s.position(j))
		changed := s.changed
		s.mu.Unlock()
		if first || p != last {
			if err := enc.Encode(p); err != nil {
				return // the client left
			}
			flush()
			last = p
		}
		if p.State.Terminal() {
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-s.streamsDone:
			return
		}
	}
}

// handleTable sends one table of a done job as an Arrow IPC stream, read from its spilled Parquet file.
func (s *Server) handleTable(w http.ResponseWriter, r *http.Request, j *job) {
	name := r.PathValue("table")
	s.mu.Lock()
	st, errMsg, captured := j.state, j.errMsg, slices.Clone(j.tables)
	p := j.progressReport(0)
	s.mu.Unlock()
	switch {
	case !slices.Contains(tables.TableNames, name):
		writeError(w, &httpError{status: http.StatusNotFound, msg: "no table " + name + ": the tables are " + strings.Join(tables.TableNames, ", ")})
		return
	case st == api.StateQueued || st == api.StateRunning:
		writeError(w, &httpError{status: http.StatusConflict, msg: "job " + j.id + " is " + string(st) +
			progressNote(p) + ": wait until it is done (" + api.ProgressPath(j.id) + ")"})
		return
	case st != api.StateDone:
		writeError(w, &httpError{status: http.StatusConflict, msg: "job " + j.id + " " + string(st) + ": " + errMsg})
		return
	case !slices.Contains(captured, name):
		writeError(w, &httpError{status: http.StatusNotFound, msg: "job " + j.id + " did not capture table " + name +
			" (it has " + strings.Join(captured, ", ") + ")"})
		return
	}
	t, err := tables.ReadParquet(s.tablePath(j.id, name), nil)
	if errors.Is(err, fs.ErrNotExist) {
		writeError(w, &httpError{status: http.StatusNotFound, msg: "job " + j.id + " has expired"})
		return
	}
	if err != nil {
		s.log.Error("reading a table", "job", j.id, "table", name, "err", err)
		writeError(w, internalError("reading table "+name+" of job "+j.id, err))
		return
	}
	defer t.Release()
	w.Header().Set("Content-Type", api.ContentTypeArrow)
	if err := tables.WriteTableIPC(w, t); err != nil {
		s.log.Warn("sending a table", "job", j.id, "table", name, "err", err)
		return // the client left mid-stream: not fetched
	}
	// Written to the end is not read to the end: the last megabytes may sit in socket buffers when the
	// client hangs up. The table counts as fetched once the client confirms (handleReceived).
	s.mu.Lock()
	if j.sent == nil {
		j.sent = map[string]bool{}
	}
	j.sent[name] = true
	s.mu.Unlock()
}

// handleReceived is a client's confirmation that it read table name of j to the end of its stream (the
// IPC end-of-stream marker): only then does the table count as fetched, and once every table has, the
// Keep period starts. A table this server did not send to its end is refused with 409.
func (s *Server) handleReceived(w http.ResponseWriter, r *http.Request, j *job) {
	name := r.PathValue("table")
	s.mu.Lock()
	sent, st, captured := j.sent[name], j.state, slices.Clone(j.tables)
	s.mu.Unlock()
	switch {
	case !slices.Contains(tables.TableNames, name):
		writeError(w, &httpError{status: http.StatusNotFound, msg: "no table " + name + ": the tables are " + strings.Join(tables.TableNames, ", ")})
		return
	case st == api.StateDone && !slices.Contains(captured, name): // else "fetch it", which answers 404
		writeError(w, &httpError{status: http.StatusNotFound, msg: "job " + j.id + " did not capture table " + name +
			" (it has " + strings.Join(captured, ", ") + ")"})
		return
	case st != api.StateDone || !sent:
		writeError(w, &httpError{status: http.StatusConflict, msg: "table " + name + " of job " + j.id +
			" was not sent to its end: fetch it (GET " + api.TablePath(j.id, name) + ") before confirming it"})
		return
	}
	s.fetched(j, name)
	w.WriteHeader(http.StatusNoContent)
}

// progressNote is " (layer 3 of 8)" for a running job, "" otherwise.
func progressNote(p api.Progress) string {
	if p.State != api.StateRunning || p.Layers == 0 {
		return ""
	}
	return fmt.Sprintf(" (layer %d of %d)", p.Layer, p.Layers)
}

// sortStatuses orders jobs by creation, then id.
func sortStatuses(list []api.JobStatus) {
	slices.SortFunc(list, func(a, b api.JobStatus) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}
