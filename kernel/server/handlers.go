package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay"
)

// Handler is the HTTP API (see the package documentation), behind the bearer-token check when the
// server has a token.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+api.PathHealth, s.handleHealth)
	mux.HandleFunc("GET "+api.PathInfo, s.handleInfo)
	mux.HandleFunc("POST "+api.PathJobs, s.handleSubmit)
	mux.HandleFunc("GET "+api.PathJobs, s.handleList)
	mux.HandleFunc("GET "+api.PathJobs+"/{id}", s.withJob(s.handleStatus))
	mux.HandleFunc("DELETE "+api.PathJobs+"/{id}", s.withJob(s.handleForget))
	mux.HandleFunc("POST "+api.PathJobs+"/{id}/cancel", s.withJob(s.handleCancel))
	mux.HandleFunc("GET "+api.PathJobs+"/{id}/progress", s.withJob(s.handleProgress))
	mux.HandleFunc("GET "+api.PathJobs+"/{id}/tables/{table}", s.withJob(s.handleTable))
	mux.HandleFunc("POST "+api.PathJobs+"/{id}/tables/{table}/received", s.withJob(s.handleReceived))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allow := allowedMethods(mux, r); len(allow) > 0 { // the path exists, for other methods
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, &httpError{status: http.StatusMethodNotAllowed,
				msg: fmt.Sprintf("%s %s: this endpoint takes %s", r.Method, r.URL.Path, strings.Join(allow, " or "))})
			return
		}
		writeError(w, &httpError{status: http.StatusNotFound, msg: "no endpoint " + r.Method + " " + r.URL.Path +
			" (the API: GET " + api.PathHealth + ", GET " + api.PathInfo + ", POST and GET " + api.PathJobs + ", and under " +
			api.PathJobs + "/ID: GET, DELETE, POST cancel, GET progress, GET tables/NAME, POST tables/NAME/received)"})
	})
	if s.cfg.Token == "" {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authorized(r, s.cfg.Token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="potato"`)
			writeError(w, &httpError{status: http.StatusUnauthorized, msg: "missing or wrong bearer token (Authorization: Bearer ...; see $POTATO_TOKEN)"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// allowedMethods is the methods for which mux routes r's path to an endpoint (not the catch-all "/"):
// with them a request of another method gets 405 and an Allow header, not 404.
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "/" && pattern != "" {
			allow = append(allow, m)
		}
	}
	return allow
}

// writeJSON answers status with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// writeError answers err as an api.Error: an *httpError with its status, anything else as a 500.
func writeError(w http.ResponseWriter, err error) {
	he := &httpError{status: http.StatusInternalServerError, msg: err.Error()}
	errors.As(err, &he)
	writeJSON(w, he.status, api.Error{Error: he.msg, Limit: he.limit})
}

// withJob checks the {id} of the path and finds the job, answering 404 when there is none.
func (s *Server) withJob(h func(http.ResponseWriter, *http.Request, *job)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		s.mu.Lock()
		var j *job
		if idPattern.MatchString(id) {
			j = s.jobs[id]
		}
		s.mu.Unlock()
		switch {
		case j == nil && !idPattern.MatchString(id): // a typo or a truncated id, not an expired job
			writeError(w, &httpError{status: http.StatusNotFound, msg: "no job " + id + ": a job id is 16 lower-case hex digits, as POST " + api.PathJobs + " answers it"})
			return
		case j == nil:
			writeError(w, &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("no job %s: never submitted here, forgotten, or expired (a job is removed --keep %v after its tables were all fetched, or after it failed or was cancelled)", id, s.cfg.Keep)})
			return
		}
		h(w, r, j)
	}
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	st := "ok"
	if s.closing {
		st = "stopping"
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, api.Health{Status: st, Version: replay.Version, PID: os.Getpid()})
}

func (s *Server) handleInfo(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Info())
}

// handleSubmit queues a job: 202 with its status and a Location header.
func (s *Server) handleSubmit(w http.ResponseWriter, r *http.Request) {
	req, err := decodeRequest(w, r, s.cfg.Limits.MaxBodyBytes, s.cfg.ReadTimeout)
	if err != nil {
		writeError(w, err)
		return
	}
	rr, prec, err := s.build(req)
	if err != nil {
		writeError(w, err)
		return
	}
	j := &job{id: newID(), label: req.Label, prec: prec, opts: req.Options, seqs: len(rr.Sequences), req: rr, reqHash: rr.Hash(),
		state: api.StateQueued, created: time.Now(), config: s.info.ConfigSHA256,
		progress: replay.Progress{Layers: s.info.Layers}}
	for _, seq := range rr.Sequences {
		j.tokens += len(seq.Tokens)
	}
	est := s.estimate(rr, req.Options.Float16)
	j.fixed = s.shape.InputBytes(rr) + est.Tables + est.Transient
	if err := s.persist(j); err != nil { // the manifest first: a crash from now on is reported, not lost
		// persist logged the error. The job's directory may have been made before the write failed
		// (a full disk takes the manifest, not the mkdir): without this each refused submission
		// would leave an empty one until a restart.
		s.remove(j)
		writeError(w, internalError("the job was not queued: writing its manifest", err))
		return
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		s.remove(j)
		writeError(w, &httpError{status: http.StatusServiceUnavailable, msg: "the server is shutting down"})
		return
	}
	s.jobs[j.id] = j
	s.pending = append(s.pending, j)
	st := j.status(len(s.pending), s.start, s.cfg.Keep)
	s.broadcast()
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	s.log.Info("job queued", "job", j.id, "sequences", j.seqs, "tokens", j.tokens, "precision", prec.String())
	w.Header().Set("Location", api.JobPath(j.id))
	writeJSON(w, http.StatusAccepted, st)
}

// statusOf is j's status with its queue position.
func (s *Server) statusOf(j *job) api.JobStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return j.status(s.position(j), s.start, s.cfg.Keep)
}

// position is j's 1-based place in the queue, 0 when it is not queued. The caller holds s.mu.
func (s *Server) position(j *job) int {
	if j.state != api.StateQueued {
		return 0
	}
	for i, p := range s.pending {
		if p == j {
			return i + 1
		}
	}
	return 0
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request, j *job) {
	writeJSON(w, http.StatusOK, s.statusOf(j))
}

// handleList answers every job the server knows, oldest first.
func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	list := make([]api.JobStatus, 0, len(s.jobs))
	for _, j := range s.jobs {
		list = append(list, j.status(s.position(j), s.start, s.cfg.Keep))
	}
	s.mu.Unlock()
	sortStatuses(list)
	writeJSON(w, http.StatusOK, list)
}

// handleCancel cancels a queued or running job; 409 when it is already over.
func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request, j *job) {
	st, ok, _ := s.cancel(j.id)
	if !ok {
		writeError(w, &httpError{status: http.StatusConflict, msg: "job " + j.id + " is already " + string(st)})
		return
	}
	writeJSON(w, http.StatusOK, s.statusOf(j))
}

// handleForget cancels the job if needed and deletes it and its results: 204.
func (s *Server) handleForget(w http.ResponseWriter, r *http.Request, j *job) {
	s.forget(j.id)
	w.WriteHeader(http.StatusNoContent)
}
