package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// Config is everything a Server is told at start. Paths come only from here (the command's flags): no
// request can name a file on the server. A number left zero takes its default; a negative one is refused
// by New (and Validate), Gather aside, as is a PrefetchExperts below -1.
type Config struct {
	// ModelDir is the model directory (config.json, safetensors, and optionally the tokenizer).
	ModelDir string
	// Backend names the backend for Info and result metadata; Open must make engines on it.
	Backend string
	// Precision is the default precision ("bf16" or "fp32"); its engine opens in New, so that a broken
	// model directory stops the server at start rather than at the first request.
	Precision string
	// Open opens an engine on ModelDir at a precision; nil means OpenCPU. The engine of the other
	// precision opens on the first request that asks for it and stays open.
	Open OpenFunc
	// SpillDir holds the results and job manifests (one directory per job). Required; one server at a
	// time may use it (New takes a lock).
	SpillDir string
	// Token, when not empty, is required as "Authorization: Bearer TOKEN" on every request. Serve refuses
	// a listener that is not loopback or a unix socket without one.
	Token string
	// Limits bound what one request may ask; zero fields take DefaultLimits' values, and negative ones
	// are refused.
	Limits api.Limits
	// Keep is how long results stay after they were fetched in full, and how long a failed or cancelled
	// job's status stays (default 30 minutes). Results never fetched stay until fetched.
	Keep time.Duration
	// Gather is how long the scheduler waits after a request arrives at an idle engine before it starts
	// a wave, so that requests sent at nearly the same time share one pass over the weights (default
	// 50ms, nothing next to a K3 wave; negative: do not wait).
	Gather time.Duration
	// ShutdownTimeout bounds how long Shutdown waits for the wave in flight before it fails it, and then
	// for the results still being written before it stops them and fails their jobs (default 10 minutes,
	// for both together).
	ShutdownTimeout time.Duration
	// ExpertChunk is passed to the engines (replay.EngineOptions.ExpertChunk).
	ExpertChunk int
	// SliceTokens, DeviceMemory and HostMemory are the budgets every wave is planned against
	// (replay.EngineOptions); the plan of each wave goes to the log and the jobs' progress.
	SliceTokens              int
	DeviceMemory, HostMemory int64
	// ExpertMajor and NoExpertPooling are passed to the engines (replay.EngineOptions).
	ExpertMajor, NoExpertPooling bool
	// HostCacheBytes is passed to the default precision's engine (replay.EngineOptions.HostCacheBytes):
	// host memory that keeps weights between waves. The other precision's engine keeps none.
	HostCacheBytes int64
	// ResidentBytes is passed to the default precision's engine (replay.EngineOptions.ResidentBytes):
	// layers' own weights kept on the backend between waves. The other precision's engine keeps none.
	ResidentBytes int64
	// PrefetchExperts is passed to the engines (replay.EngineOptions.PrefetchExperts): 0 none, -1 all of
	// a layer's experts.
	PrefetchExperts int
	// ReadHeaderTimeout bounds how long a client may take to send a request's headers (default 10 s);
	// ReadTimeout how long it may take to send a job's body (default 1 minute: 64 MiB at about 1 MB/s),
	// so that a body trickling in at a byte a second does not hold a connection and a goroutine forever;
	// IdleTimeout how long a kept-alive connection may wait for its next request (default 2 minutes).
	// Responses have no write timeout: progress streams and large tables take as long as they take.
	// Keep, ShutdownTimeout and these three take their default at zero and are refused when negative;
	// Gather alone means something when negative.
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
	// Logger receives one line per job and wave; nil means slog.Default().
	Logger *slog.Logger
}

// OpenFunc opens an engine on dir at precision prec with opts (whose Progress the server sets).
type OpenFunc func(ctx context.Context, dir string, prec ops.Precision, opts replay.EngineOptions) (*Opened, error)

// Opened is an engine and what to do to close it.
type Opened struct {
	Engine  *replay.Engine
	Backend string // the backend's name, for metadata
	Close   func() // frees the engine and its checkpoint; may be nil
}

// OpenCPU opens dir on the pure-Go CPU backend. Its error is replay.Open's: a model directory that is
// missing, damaged or not a K3 checkpoint, named with the file and tensor at fault.
func OpenCPU(ctx context.Context, dir string, prec ops.Precision, opts replay.EngineOptions) (*Opened, error) {
	b := cpu.New(cpu.Options{Precision: prec})
	e, d, err := replay.Open(ctx, dir, b, opts)
	if err != nil {
		return nil, err
	}
	return &Opened{Engine: e, Backend: b.Name(), Close: func() { e.Close(); d.Close() }}, nil
}

// DefaultLimits are the limits of a server whose Config leaves them zero. A sequence and a wave may hold
// K3's context of 1,048,576 tokens: one read of the weights serves every token of a wave, so the engine
// plans each wave from the memory budgets (replay.WavePlan: token-sliced layers, state off the device)
// and refuses, with the budget named, what they cannot hold; these limits only bound what one request
// may ask for. MaxResultBytes has no fixed default: zero takes tables.DefaultResultLimit when the server
// starts (half the memory available), as potato replay does.
var DefaultLimits = api.Limits{
	MaxBodyBytes:      64 << 20,
	MaxSequenceTokens: 1 << 20,
	MaxRequestTokens:  1 << 20,
	MaxSequences:      4096,
	MaxTopK:           1024,
	MaxWaveTokens:     1 << 20,
}

// Validate returns the error New would return for c before it opens anything: a missing model or spill
// directory, an unknown precision, a backend without an Open function, or a number no default stands
// for (a negative limit, duration, budget or count; see the fields). Zero fields are not errors: they
// take their defaults.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

// checkNumbers refuses the negative numbers of c (Gather aside: negative there means do not wait) and a
// PrefetchExperts below -1. Left alone, a negative limit would refuse every request with a message
// quoting it ("more than -5 tokens"), and a negative duration, budget or count means nothing documented.
func (c Config) checkNumbers() error {
	l := c.Limits
	for _, n := range []struct {
		field string
		v     int64
	}{
		{"Limits.MaxBodyBytes", l.MaxBodyBytes}, {"Limits.MaxSequenceTokens", int64(l.MaxSequenceTokens)},
		{"Limits.MaxRequestTokens", int64(l.MaxRequestTokens)}, {"Limits.MaxSequences", int64(l.MaxSequences)},
		{"Limits.MaxTopK", int64(l.MaxTopK)}, {"Limits.MaxWaveTokens", int64(l.MaxWaveTokens)},
		{"Limits.MaxResultBytes", l.MaxResultBytes},
		{"ExpertChunk", int64(c.ExpertChunk)}, {"SliceTokens", int64(c.SliceTokens)},
		{"DeviceMemory", c.DeviceMemory}, {"HostMemory", c.HostMemory},
		{"HostCacheBytes", c.HostCacheBytes}, {"ResidentBytes", c.ResidentBytes},
	} {
		if n.v < 0 {
			return fmt.Errorf("server: %s %d is negative (0: the default)", n.field, n.v)
		}
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"Keep", c.Keep}, {"ShutdownTimeout", c.ShutdownTimeout},
		{"ReadHeaderTimeout", c.ReadHeaderTimeout}, {"ReadTimeout", c.ReadTimeout}, {"IdleTimeout", c.IdleTimeout},
	} {
		if d.v < 0 {
			return fmt.Errorf("server: %s %v is negative (0: the default)", d.field, d.v)
		}
	}
	if c.PrefetchExperts < -1 {
		return fmt.Errorf("server: PrefetchExperts %d: want a count, or -1 for all", c.PrefetchExperts)
	}
	return nil
}

// withDefaults returns c with every unset field at its default, or an error for a field that has none or
// a number that cannot mean anything (checkNumbers).
func (c Config) withDefaults() (Config, error) {
	if c.ModelDir == "" {
		return c, errors.New("server: no model directory")
	}
	if c.SpillDir == "" {
		return c, errors.New("server: no spill directory")
	}
	if c.Backend == "" {
		c.Backend = "cpu"
	}
	if c.Precision == "" {
		c.Precision = "bf16"
	}
	if _, err := ops.ParsePrecision(c.Precision); err != nil {
		return c, fmt.Errorf("server: %w", err)
	}
	if c.Open == nil {
		if c.Backend != "cpu" {
			return c, fmt.Errorf("server: backend %q needs an Open function", c.Backend)
		}
		c.Open = OpenCPU
	}
	if err := c.checkNumbers(); err != nil {
		return c, err
	}
	d := DefaultLimits
	l := &c.Limits
	l.MaxBodyBytes = or(l.MaxBodyBytes, d.MaxBodyBytes)
	l.MaxSequenceTokens = or(l.MaxSequenceTokens, d.MaxSequenceTokens)
	l.MaxRequestTokens = or(l.MaxRequestTokens, d.MaxRequestTokens)
	l.MaxSequences = or(l.MaxSequences, d.MaxSequences)
	l.MaxTopK = or(l.MaxTopK, d.MaxTopK)
	l.MaxWaveTokens = or(l.MaxWaveTokens, d.MaxWaveTokens)
	if l.MaxResultBytes == 0 {
		l.MaxResultBytes, _ = tables.DefaultResultLimit()
	}
	c.Keep = or(c.Keep, 30*time.Minute)
	c.Gather = or(c.Gather, 50*time.Millisecond)
	c.ShutdownTimeout = or(c.ShutdownTimeout, 10*time.Minute)
	c.ReadHeaderTimeout = or(c.ReadHeaderTimeout, 10*time.Second)
	c.ReadTimeout = or(c.ReadTimeout, time.Minute)
	c.IdleTimeout = or(c.IdleTimeout, 2*time.Minute)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// or returns v, or def when v is zero.
func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
