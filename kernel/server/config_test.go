package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// A Config with a negative limit, duration, budget or count is refused by Validate and by New before any
// engine opens, naming the field; zero is each field's default and is accepted, as are a negative
// Gather (do not wait) and PrefetchExperts -1 (all).
func TestConfigValidate(t *testing.T) {
	base := func() Config { return Config{ModelDir: "model", SpillDir: "spill"} }
	for _, tt := range []struct {
		name string
		edit func(*Config)
		want string // "" for a valid configuration
	}{
		{"zero numbers take the defaults", func(c *Config) {}, ""},
		{"every number set", func(c *Config) {
			c.Limits = api.Limits{MaxBodyBytes: 1 << 20, MaxSequenceTokens: 10, MaxRequestTokens: 20, MaxSequences: 2,
				MaxTopK: 5, MaxWaveTokens: 30, MaxResultBytes: 1 << 30}
			c.Keep, c.Gather, c.ShutdownTimeout = time.Second, time.Millisecond, time.Minute
			c.ReadHeaderTimeout, c.ReadTimeout, c.IdleTimeout = time.Second, time.Second, time.Second
			c.ExpertChunk, c.SliceTokens, c.PrefetchExperts = 4, 64, 8
			c.DeviceMemory, c.HostMemory, c.HostCacheBytes, c.ResidentBytes = 1<<30, 1<<30, 1<<20, 1<<20
		}, ""},
		{"negative gather: do not wait", func(c *Config) { c.Gather = -1 }, ""},
		{"prefetch -1: all", func(c *Config) { c.PrefetchExperts = -1 }, ""},

		{"no model", func(c *Config) { c.ModelDir = "" }, "server: no model directory"},
		{"body", func(c *Config) { c.Limits.MaxBodyBytes = -1 }, "server: Limits.MaxBodyBytes -1 is negative (0: the default)"},
		{"sequence tokens", func(c *Config) { c.Limits.MaxSequenceTokens = -5 }, "server: Limits.MaxSequenceTokens -5 is negative"},
		{"request tokens", func(c *Config) { c.Limits.MaxRequestTokens = -1 }, "server: Limits.MaxRequestTokens -1 is negative"},
		{"sequences", func(c *Config) { c.Limits.MaxSequences = -1 }, "server: Limits.MaxSequences -1 is negative"},
		{"top-k", func(c *Config) { c.Limits.MaxTopK = -1 }, "server: Limits.MaxTopK -1 is negative"},
		{"wave tokens", func(c *Config) { c.Limits.MaxWaveTokens = -1 }, "server: Limits.MaxWaveTokens -1 is negative"},
		{"result bytes", func(c *Config) { c.Limits.MaxResultBytes = -1 }, "server: Limits.MaxResultBytes -1 is negative"},
		{"expert chunk", func(c *Config) { c.ExpertChunk = -1 }, "server: ExpertChunk -1 is negative"},
		{"slice tokens", func(c *Config) { c.SliceTokens = -1 }, "server: SliceTokens -1 is negative"},
		{"device memory", func(c *Config) { c.DeviceMemory = -1 }, "server: DeviceMemory -1 is negative"},
		{"host memory", func(c *Config) { c.HostMemory = -1 }, "server: HostMemory -1 is negative"},
		{"host cache", func(c *Config) { c.HostCacheBytes = -1 }, "server: HostCacheBytes -1 is negative"},
		{"resident", func(c *Config) { c.ResidentBytes = -1 }, "server: ResidentBytes -1 is negative"},
		{"keep", func(c *Config) { c.Keep = -time.Second }, "server: Keep -1s is negative (0: the default)"},
		{"shutdown timeout", func(c *Config) { c.ShutdownTimeout = -time.Second }, "server: ShutdownTimeout -1s is negative"},
		{"read header timeout", func(c *Config) { c.ReadHeaderTimeout = -time.Second }, "server: ReadHeaderTimeout -1s is negative"},
		{"read timeout", func(c *Config) { c.ReadTimeout = -time.Second }, "server: ReadTimeout -1s is negative"},
		{"idle timeout", func(c *Config) { c.IdleTimeout = -time.Second }, "server: IdleTimeout -1s is negative"},
		{"prefetch", func(c *Config) { c.PrefetchExperts = -5 }, "server: PrefetchExperts -5: want a count, or -1 for all"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate: %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate: %v, want …%s…", err, tt.want)
			}
		})
	}
}

// New refuses a negative limit before it opens an engine, and leaves the spill directory unlocked.
func TestConfigRefusedByNew(t *testing.T) {
	spill := t.TempDir()
	cfg := Config{ModelDir: "model", SpillDir: spill, Limits: api.Limits{MaxSequenceTokens: -5},
		Open: func(context.Context, string, ops.Precision, replay.EngineOptions) (*Opened, error) {
			t.Error("an engine was opened for a refused Config")
			return nil, context.Canceled
		}}
	s, err := New(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "Limits.MaxSequenceTokens -5 is negative") {
		if s != nil {
			s.Shutdown(context.Background())
		}
		t.Fatalf("New: %v, want the negative limit refused", err)
	}
	// The spill directory's lock was never taken (or was given back): another server may take it.
	l, err := lockSpill(spill)
	if err != nil {
		t.Fatalf("the spill directory after a refused Config: %v", err)
	}
	unlockSpill(l)
}
