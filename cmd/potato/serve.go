package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/kernel/server"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/synth"
)

func init() {
	commands["serve"] = command{"run the resident engine for notebooks: HTTP + JSON in, Arrow IPC streams out", runServe}
}

// serveFlags are the flags of `potato serve`.
type serveFlags struct {
	mem                                                            memoryFlags // --slice-tokens, --device-memory, --host-memory
	model, backend, precision, listen, tokenFile, spill, stateFile string
	limits                                                         api.Limits
	keep, gather, shutdownTimeout, readTimeout                     time.Duration
	expertChunk, prefetch                                          int
	hostCache, resident, maxResult, maxBody                        byteSize
}

// parseServeFlags parses serve's arguments and checks them (check), before anything is opened.
func parseServeFlags(args []string, stdout io.Writer) (*serveFlags, error) {
	f := &serveFlags{}
	fs := newFlags("serve", "usage: potato serve [--model DIR] [--backend cpu|cuda] [--listen ADDR] [flags]\n\n"+
		"Keeps the engine resident and serves replays over HTTP (README, \"The service over HTTP\"); notebooks\n"+
		"reach it through package kernel.\n")
	d := server.DefaultLimits
	fs.StringVar(&f.model, "model", "", "model directory (default: the embedded demo model, a small K3 trained on text)")
	fs.StringVar(&f.backend, "backend", "cpu", "backend: cpu or cuda")
	fs.StringVar(&f.precision, "precision", "bf16", "default precision, bf16 or fp32 (the other opens on a request's first use)")
	fs.StringVar(&f.listen, "listen", server.DefaultListen, "host:port, or unix:/path for a unix socket; any address but loopback or a socket needs --token-file")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token every request must carry (at least 16 characters); - for stdin")
	fs.StringVar(&f.spill, "spill", "", "directory for results and job manifests (default: spill/ under the cache directory)")
	fs.StringVar(&f.stateFile, "state-file", "", "write the address and pid here once listening (for notebook clients); removed at exit")
	fs.Var(&f.maxBody, "max-body-bytes", fmt.Sprintf("largest request body, e.g. 64MB or 1GiB (0 or unset: %d MiB)", d.MaxBodyBytes>>20))
	fs.IntVar(&f.limits.MaxSequenceTokens, "max-tokens", d.MaxSequenceTokens, "most tokens of one sequence (positive)")
	fs.IntVar(&f.limits.MaxRequestTokens, "max-request-tokens", d.MaxRequestTokens, "most tokens of one request (positive)")
	fs.IntVar(&f.limits.MaxSequences, "max-sequences", d.MaxSequences, "most sequences of one request (positive)")
	fs.IntVar(&f.limits.MaxTopK, "max-top-k", d.MaxTopK, "largest top_k (positive)")
	fs.IntVar(&f.limits.MaxWaveTokens, "max-wave-tokens", d.MaxWaveTokens, "a wave takes queued requests up to this many tokens (positive; a larger request runs alone, in passes of at most this many; a longer sequence is refused)")
	fs.Var(&f.maxResult, "max-result-bytes", "most host memory a request's results, and a wave's, may hold until written, e.g. 8GB (0 or unset: half the memory available at start, as potato replay)")
	fs.DurationVar(&f.keep, "keep", 30*time.Minute, "how long results stay after they were fetched, and failed jobs' status (positive)")
	fs.DurationVar(&f.gather, "gather", 50*time.Millisecond, "wait this long after a request reaches an idle engine, so that requests sent together share a wave (0: start at once)")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Minute, "on SIGTERM, how long the wave in flight and the results being written may take to finish before they are failed (positive)")
	fs.DurationVar(&f.readTimeout, "read-timeout", time.Minute, "how long a client may take to send a job's body (positive; headers: 10s; an idle kept-alive connection: 2m)")
	fs.IntVar(&f.expertChunk, "expert-chunk", 0, "routed experts resident at once per MoE layer (0: all chosen, or on a device too small for them the largest chunk the plan fits); results do not depend on it")
	fs.Var(&f.hostCache, "host-cache", "host memory that keeps weights between waves, e.g. 200GB (page-locked on cuda; 0: read every wave from the checkpoint); the default precision's engine only; results do not depend on it")
	fs.Var(&f.resident, "resident", "checkpoint bytes of the layers' own weights (all but routed experts) kept on the backend between waves, e.g. 100GB (device memory on cuda; 0: upload every wave); the default precision's engine only; results do not depend on it")
	f.mem.register(fs)
	fs.IntVar(&f.prefetch, "prefetch-experts", -1, "routed experts of an MoE layer uploaded from the host cache before its router runs, in large waves (-1: all; 0: none) (overlaps their copy with attention on cuda; needs --host-cache); results do not depend on it")
	if err := parseFlags(fs, args, stdout); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usagef("serve", "serve: unexpected argument %q", fs.Arg(0))
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	return f, nil
}

// check refuses, before the model is looked up, the engine opens or anything listens, every number no
// server could run with, naming the flag and what it takes, as replay and bench do: a limit below 1 (a
// limit of 0 is no default here: it would silently take DefaultLimits', and a negative one would refuse
// every request with a message about a negative limit), a duration that is not positive (--gather
// aside, where 0 starts at once), a negative --expert-chunk, a --prefetch-experts below -1, and the
// memory budgets' flags (memoryFlags.check). Size flags (byteSize) cannot be negative, and 0 there is
// each one's stated default.
func (f *serveFlags) check() error {
	if err := checkPositive("serve", intFlag{"--max-tokens", f.limits.MaxSequenceTokens}, intFlag{"--max-request-tokens", f.limits.MaxRequestTokens},
		intFlag{"--max-sequences", f.limits.MaxSequences}, intFlag{"--max-top-k", f.limits.MaxTopK},
		intFlag{"--max-wave-tokens", f.limits.MaxWaveTokens}); err != nil {
		return err
	}
	for _, t := range []struct {
		flag string
		v    time.Duration
	}{{"--keep", f.keep}, {"--shutdown-timeout", f.shutdownTimeout}, {"--read-timeout", f.readTimeout}} {
		if t.v <= 0 {
			return fmt.Errorf("serve: %s %v must be positive", t.flag, t.v)
		}
	}
	if f.gather < 0 {
		return fmt.Errorf("serve: --gather %v is negative (0: start at once)", f.gather)
	}
	if f.expertChunk < 0 {
		return fmt.Errorf("serve: --expert-chunk %d is negative (0: all chosen)", f.expertChunk)
	}
	if f.prefetch < -1 {
		return fmt.Errorf("serve: --prefetch-experts %d: want a count, or -1 for all", f.prefetch)
	}
	if err := f.mem.check(f.backend); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

func runServe(ctx context.Context, args []string, stdout io.Writer) error {
	f, err := parseServeFlags(args, stdout)
	if err != nil {
		return err
	}
	cfg, err := f.config(ctx)
	if err != nil {
		return err
	}
	// Refuse an exposed address without a token before the engine opens or anything prints "listening".
	if err := server.CheckListen(f.listen, cfg.Token); err != nil {
		return err
	}
	// The engine opens and the spill is read before anything listens, so a client never reaches a server
	// that cannot replay. Opening is not cut short by a signal: stopping then is simply slower.
	srv, err := server.New(context.WithoutCancel(ctx), cfg)
	if err != nil {
		return err
	}
	l, err := server.Listen(f.listen)
	if err != nil {
		srv.Shutdown(context.Background())
		return err
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(l) }()
	if f.stateFile != "" {
		st := api.State{Addr: server.AddrString(l.Addr()), PID: os.Getpid(), Started: time.Now(), Model: cfg.ModelDir,
			Source: api.SourceRoot()}
		if err := writeState(f.stateFile, st); err != nil {
			srv.Shutdown(context.Background())
			return err
		}
		defer removeState(f.stateFile)
	}
	fmt.Fprintf(stdout, "potato serve: listening on %s\n", server.AddrString(l.Addr()))
	select {
	case err := <-serveErr: // the listener failed, or Serve refused it
		srv.Shutdown(context.Background())
		return err
	case <-ctx.Done(): // SIGTERM or SIGINT
	}
	fmt.Fprintf(os.Stderr, "potato serve: stopping: the wave in flight and the results being written may finish (up to --shutdown-timeout %v); interrupt again to quit at once\n", f.shutdownTimeout)
	return srv.Shutdown(context.Background()) // bounded by --shutdown-timeout
}

// config turns the flags into a server.Config, the model and spill directories defaulting to the cache.
func (f *serveFlags) config(ctx context.Context) (server.Config, error) {
	f.limits.MaxResultBytes = int64(f.maxResult) // 0: tables.DefaultResultLimit, in server.New
	f.limits.MaxBodyBytes = int64(f.maxBody)     // 0: DefaultLimits.MaxBodyBytes, in server.New
	cfg := server.Config{Backend: f.backend, Precision: f.precision, SpillDir: f.spill, Limits: f.limits,
		Keep: f.keep, Gather: f.gather, ShutdownTimeout: f.shutdownTimeout, ReadTimeout: f.readTimeout, ExpertChunk: f.expertChunk, HostCacheBytes: int64(f.hostCache), ResidentBytes: int64(f.resident), PrefetchExperts: f.prefetch,
		SliceTokens: f.mem.sliceTokens, ExpertMajor: f.mem.expertMajor, NoExpertPooling: f.mem.noPooling, DeviceMemory: int64(f.mem.device), HostMemory: int64(f.mem.host),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	var err error
	if cfg.ModelDir, err = modelDir(ctx, f.model); err != nil {
		return cfg, err
	}
	if f.tokenFile != "" {
		if cfg.Token, err = server.ReadToken(f.tokenFile); err != nil {
			return cfg, err
		}
	}
	if cfg.SpillDir == "" {
		root, err := synth.CacheDir()
		if err != nil {
			return cfg, err
		}
		cfg.SpillDir = filepath.Join(root, "spill")
	}
	if f.gather == 0 {
		cfg.Gather = -1 // --gather 0: start at once (Config treats 0 as the default)
	}
	backend, devices := f.backend, f.mem.devices
	cfg.Open = func(ctx context.Context, dir string, prec ops.Precision, opts replay.EngineOptions) (*server.Opened, error) {
		l, err := openEngine(ctx, dir, backend, prec.String(), backendTuning{devices: devices}, opts)
		if err != nil {
			return nil, err
		}
		return &server.Opened{Engine: l.engine, Backend: l.backend, Close: l.Close}, nil
	}
	return cfg, nil
}

// writeState writes the state file atomically (a reader never sees half of it).
func writeState(path string, st api.State) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("serve: state file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("serve: state file: %w", err)
	}
	return nil
}

// removeState removes the state file if it is still this process's (a newer server may have replaced it).
func removeState(path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var st api.State
	if json.Unmarshal(data, &st) == nil && st.PID == os.Getpid() {
		os.Remove(path)
	}
}
