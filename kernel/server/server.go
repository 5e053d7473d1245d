package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/potato-k3/potato-k3/internal/filelock"
	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/tables"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// Server is the resident engine: it owns the open engines, queues jobs into shared waves, spills
// results and serves the HTTP API (see the package documentation). Its methods are safe for concurrent
// use.
type Server struct {
	cfg   Config
	log   *slog.Logger
	start time.Time
	prec  ops.Precision // the default precision
	tok   *tokenizer.Tokenizer
	piece func(id int32) string // names the top-k ids of the tables (topk_tokens); nil without a tokenizer
	info  api.Info              // the static part of Info
	shape tables.Shape          // what the estimate of a request's results needs of the model (--max-result-bytes)
	lock  *filelock.Lock        // the spill directory's lock, held for the server's life

	engMu   sync.Mutex
	engines map[ops.Precision]*Opened

	mu      sync.Mutex
	jobs    map[string]*job
	pending []*job // queued jobs in arrival order
	current *wave  // the wave in flight
	waves   int64
	changed chan struct{} // closed and replaced on every change of any job: wakes progress streams
	closing bool
	https   []*http.Server
	// held is the estimate of the results of finished waves whose tables are still being written (each
	// job's share, wave.share); take starts no wave that would pass MaxResultBytes beside them.
	held int64

	wake        chan struct{} // a job was queued
	stop        chan struct{} // closed by Shutdown: the scheduler exits after the wave in flight
	loopDone    chan struct{}
	streamsDone chan struct{} // closed at the end of Shutdown: progress streams end
	janitorDone chan struct{}
	spills      sync.WaitGroup
	shutdown    sync.Once
	// spillCtx is the context of every job's writing of its results; Shutdown cancels it (stopSpills,
	// with errSpillShutdown) once its time is up, so that a spill of many GB stops within a batch.
	spillCtx   context.Context
	stopSpills context.CancelCauseFunc

	hooks testHooks
}

// testHooks let in-package tests hold the scheduler at known points; nil in production.
type testHooks struct {
	beforeWave func(ids []string)      // on the scheduler goroutine, before the wave runs
	afterLayer func(p replay.Progress) // on the scheduler goroutine, after each layer's report
	// spillBatch runs on a job's spill goroutine before each record batch of its tables is built; an
	// error it returns stands for the write's, as a full disk would return it.
	spillBatch func(id, table string) error
	// manifestWrite runs before a manifest's temporary file (path) is written; an error it returns
	// stands for the write's, as a full disk would return it.
	manifestWrite func(path string) error
}

// New opens the default precision's engine on cfg.ModelDir, finds again the jobs spilled under
// cfg.SpillDir by an earlier server (unfinished ones are marked failed), and starts the scheduler. Call
// Serve to answer requests and Shutdown to stop. It returns no server, and holds nothing, when cfg is
// invalid (Validate's error), when another server holds the spill directory (naming its pid), when the
// tokenizer or the engine cannot be opened on cfg.ModelDir (naming the directory and the file at fault),
// and when the spilled jobs cannot be read.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, start: time.Now(), engines: map[ops.Precision]*Opened{},
		jobs: map[string]*job{}, changed: make(chan struct{}), wake: make(chan struct{}, 1),
		stop: make(chan struct{}), loopDone: make(chan struct{}), streamsDone: make(chan struct{}),
		janitorDone: make(chan struct{})}
	s.prec, _ = ops.ParsePrecision(cfg.Precision) // checked by withDefaults
	if s.lock, err = lockSpill(cfg.SpillDir); err != nil {
		return nil, err
	}
	if s.tok, err = tokenizer.Load(cfg.ModelDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		unlockSpill(s.lock)
		return nil, fmt.Errorf("server: %w", err)
	}
	s.piece = pieceFunc(s.tok)
	o, err := s.engine(ctx, s.prec)
	if err != nil {
		unlockSpill(s.lock)
		return nil, err
	}
	s.info = modelInfo(cfg, o, s.tok != nil)
	s.shape = tables.ShapeOf(o.Engine.Plan, s.piece)
	if err := s.recover(); err != nil {
		s.closeEngines()
		unlockSpill(s.lock)
		return nil, err
	}
	s.spillCtx, s.stopSpills = context.WithCancelCause(context.Background()) // Shutdown cancels it
	go s.loop()
	go s.janitor()
	return s, nil
}

// engine returns the open engine of precision p, opening it on first use.
func (s *Server) engine(ctx context.Context, p ops.Precision) (*Opened, error) {
	s.engMu.Lock()
	defer s.engMu.Unlock()
	if o := s.engines[p]; o != nil {
		return o, nil
	}
	s.log.Info("opening engine", "model", s.cfg.ModelDir, "precision", p.String())
	// MaxWaveTokens also bounds the engine: a job larger than a wave runs as several (a gathered wave
	// never exceeds it, but a single job may hold --max-request-tokens).
	opts := replay.EngineOptions{ExpertChunk: s.cfg.ExpertChunk, Progress: s.onProgress,
		MaxWaveTokens: s.cfg.Limits.MaxWaveTokens, PrefetchExperts: s.cfg.PrefetchExperts,
		SliceTokens: s.cfg.SliceTokens, ExpertMajor: s.cfg.ExpertMajor, NoExpertPooling: s.cfg.NoExpertPooling, DeviceMemory: s.cfg.DeviceMemory, HostMemory: s.cfg.HostMemory,
		Log: func(line string) { s.log.Info("wave plan", "plan", line) }}
	if p == s.prec {
		// Only the default precision's engine keeps weights: a second one opened on demand would pin as
		// much host and device memory again, past what the budgets were sized for.
		opts.HostCacheBytes, opts.ResidentBytes = s.cfg.HostCacheBytes, s.cfg.ResidentBytes
	}
	o, err := s.cfg.Open(ctx, s.cfg.ModelDir, p, opts)
	if err != nil {
		return nil, fmt.Errorf("server: opening %s at %s: %w", s.cfg.ModelDir, p, err)
	}
	s.engines[p] = o
	return o, nil
}

// closeEngines frees every open engine.
func (s *Server) closeEngines() {
	s.engMu.Lock()
	defer s.engMu.Unlock()
	for p, o := range s.engines {
		if o.Close != nil {
			o.Close()
		}
		delete(s.engines, p)
	}
}

// modelInfo is the static part of Info, read from the default engine.
func modelInfo(cfg Config, o *Opened, tok bool) api.Info {
	e := o.Engine
	info := api.Info{ModelDir: cfg.ModelDir, ConfigSHA256: e.ConfigSHA256, WeightsSHA256: e.WeightsSHA256, EngineVersion: replay.Version,
		Backend: o.Backend, Precision: cfg.Precision, Precisions: []string{"bf16", "fp32"},
		Layers: len(e.Plan.Layers), Vocab: e.Model.Dims.Vocab, Hidden: e.Model.Dims.Hidden,
		Experts: e.Model.Dims.Experts, ExpertsPerToken: e.Model.Dims.TopK, Tokenizer: tok, Limits: cfg.Limits}
	for _, l := range e.Plan.Layers {
		info.LayerKinds = append(info.LayerKinds, api.LayerKind{Layer: l.Index, Attn: l.Attn.String(), FFN: l.FFN.String()})
	}
	return info
}

// pieceFunc returns tok.Piece for the topk_tokens columns, with every id of the vocabulary rendered once up
// front (a few MB for K3): a wave's lens tables can name millions of ids, and Piece builds a new string
// each call. nil without a tokenizer.
func pieceFunc(tok *tokenizer.Tokenizer) func(id int32) string {
	if tok == nil {
		return nil
	}
	pieces := make([]string, tok.VocabSize())
	for id := range pieces {
		pieces[id] = tok.Piece(int32(id))
	}
	return func(id int32) string {
		if id >= 0 && int(id) < len(pieces) {
			return pieces[id]
		}
		return tok.Piece(id) // "<bad id N>"
	}
}

// Info describes the model and limits, with the precisions whose engine is open now.
func (s *Server) Info() api.Info {
	info := s.info
	s.engMu.Lock()
	info.Open = nil
	for _, name := range info.Precisions {
		if p, _ := ops.ParsePrecision(name); s.engines[p] != nil {
			info.Open = append(info.Open, name)
		}
	}
	s.engMu.Unlock()
	return info
}

// broadcast wakes every progress stream. The caller holds s.mu.
func (s *Server) broadcast() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Serve answers the API on l until Shutdown, and then returns nil. It refuses a listener that is neither
// loopback nor a unix socket when the server has no token: anyone who reaches the port could otherwise
// use the engine. Called after Shutdown began it returns http.ErrServerClosed at once; a listener that
// fails (Accept's error) ends it with that error.
func (s *Server) Serve(l net.Listener) error {
	if err := CheckExposure(l.Addr(), s.cfg.Token); err != nil {
		return err
	}
	// No write timeout: progress streams and large tables take as long as they take. The body's timeout
	// (ReadTimeout) is set per request where a body is read (decodeRequest): http.Server's ReadTimeout
	// would also end the connection's background read under a long progress stream.
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: s.cfg.ReadHeaderTimeout, IdleTimeout: s.cfg.IdleTimeout,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.https = append(s.https, hs)
	s.mu.Unlock()
	s.log.Info("serving", "addr", AddrString(l.Addr()), "model", s.cfg.ModelDir, "spill", s.cfg.SpillDir)
	if err := hs.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}

// Shutdown stops the server gracefully: it stops accepting connections and jobs, fails the queued jobs,
// lets the wave in flight finish (or fails it once cfg.ShutdownTimeout or ctx runs out), waits for
// results to be spilled (and, once that same time is up, stops those still being written within a record
// batch, failing their jobs with nothing of their tables left), ends the progress streams and closes the
// engines. Spilled results stay for the next server on the same spill directory. Its error is only that
// of closing the HTTP servers (ctx ended while requests such as progress streams were still open); the
// jobs it fails say why in their status. A second call does nothing and returns nil.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.shutdown.Do(func() { err = s.doShutdown(ctx) })
	return err
}

func (s *Server) doShutdown(ctx context.Context) error {
	s.log.Info("shutting down")
	now := time.Now()
	s.mu.Lock()
	s.closing = true
	dropped := s.pending
	s.pending = nil
	for _, j := range dropped {
		j.terminal(api.StateFailed, "the server shut down before this job's wave started; submit it again", now)
	}
	https := s.https
	s.broadcast()
	s.mu.Unlock()
	for _, j := range dropped {
		s.persist(j)
	}
	httpDone := make(chan error, len(https))
	for _, hs := range https {
		go func() { httpDone <- hs.Shutdown(ctx) }() // closes the listeners now; running requests go on
	}
	close(s.stop)
	timeout := time.NewTimer(s.cfg.ShutdownTimeout)
	defer timeout.Stop()
	late := false // the time is up: the wave was failed, and the spills are stopped too
	select {
	case <-s.loopDone:
	case <-timeout.C:
		late = true
		s.cancelCurrent(errors.New("the server shut down before this job's wave finished; submit it again"))
	case <-ctx.Done():
		late = true
		s.cancelCurrent(errors.New("the server shut down before this job's wave finished; submit it again"))
	}
	<-s.loopDone
	s.waitSpills(ctx, timeout.C, late)
	close(s.streamsDone)
	<-s.janitorDone
	var err error
	for range https {
		if e := <-httpDone; e != nil && err == nil {
			err = fmt.Errorf("server: shutdown: %w", e)
		}
	}
	s.closeEngines()
	unlockSpill(s.lock)
	s.log.Info("stopped")
	return err
}

// waitSpills waits for the results being written (and the manifests), for as long as the shutdown's
// time (timeout, ctx) lasts; once it is up (late: already) it stops them, and waits for them to stop,
// within a record batch each: tables.WriteSetFrom leaves nothing of a set it did not finish.
func (s *Server) waitSpills(ctx context.Context, timeout <-chan time.Time, late bool) {
	spilled := make(chan struct{})
	go func() {
		s.spills.Wait()
		close(spilled)
	}()
	if !late {
		select {
		case <-spilled:
		case <-timeout:
		case <-ctx.Done():
		}
	}
	s.stopSpills(errSpillShutdown) // nothing to stop when all were written; spillCtx is released either way
	<-spilled
}

// cancelCurrent stops the wave in flight, failing its jobs with cause.
func (s *Server) cancelCurrent(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.current; w != nil && w.cancel != nil {
		w.cancel(cause)
	}
}
