package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/kernel/server"
)

// potato serve refuses, before it looks at the model or listens, every number no server could run with,
// naming the flag and what it takes, as replay and bench do. Before, --max-top-k -1 and --max-tokens -5
// started a server that answered every request with "more than -5 tokens", and --max-tokens 0 silently
// became the default.
func TestServeFlagRefusals(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-tokens", "-5"}, "serve: --max-tokens -5 must be positive"},
		{[]string{"--max-tokens", "0"}, "serve: --max-tokens 0 must be positive"},
		{[]string{"--max-request-tokens", "0"}, "serve: --max-request-tokens 0 must be positive"},
		{[]string{"--max-sequences", "0"}, "serve: --max-sequences 0 must be positive"},
		{[]string{"--max-top-k", "-1"}, "serve: --max-top-k -1 must be positive"},
		{[]string{"--max-wave-tokens", "0"}, "serve: --max-wave-tokens 0 must be positive"},
		{[]string{"--keep", "-1s"}, "serve: --keep -1s must be positive"},
		{[]string{"--keep", "0"}, "serve: --keep 0s must be positive"},
		{[]string{"--shutdown-timeout", "-1s"}, "serve: --shutdown-timeout -1s must be positive"},
		{[]string{"--read-timeout", "0s"}, "serve: --read-timeout 0s must be positive"},
		{[]string{"--gather", "-1ms"}, "serve: --gather -1ms is negative (0: start at once)"},
		{[]string{"--expert-chunk", "-1"}, "serve: --expert-chunk -1 is negative (0: all chosen)"},
		{[]string{"--prefetch-experts", "-5"}, "serve: --prefetch-experts -5: want a count, or -1 for all"},
		{[]string{"--slice-tokens", "-1"}, "serve: --slice-tokens -1 is negative"},
		{[]string{"--max-body-bytes", "-1MB"}, `"-1MB" is not a size`},
		{[]string{"--max-body-bytes", "64 parsecs"}, `"64 parsecs" is not a size`},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			// An empty model directory: were a number let through, New would fail opening it instead of
			// serving, and the message would not be the one wanted.
			args := append([]string{"serve", "--model", t.TempDir(), "--spill", t.TempDir(), "--listen", "127.0.0.1:0"}, tt.args...)
			var stdout bytes.Buffer
			err := run(context.Background(), args, &stdout)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("potato %v: %v, want …%s…", tt.args, err, tt.want)
			}
			if stdout.Len() > 0 {
				t.Errorf("potato %v printed %q before refusing", tt.args, stdout.String())
			}
		})
	}
}

// The smallest values each flag accepts, sizes with units, and the zeros that stand for a default, make
// a server.Config that Validate accepts, with each value where serve put it.
func TestServeFlagsValid(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want func(server.Config) bool
	}{
		{"defaults", nil, func(c server.Config) bool {
			return c.Limits == api.Limits{MaxSequenceTokens: 1 << 20, MaxRequestTokens: 1 << 20, MaxSequences: 4096,
				MaxTopK: 1024, MaxWaveTokens: 1 << 20} && c.PrefetchExperts == -1 && c.Keep == 30*time.Minute
		}},
		{"smallest limits", []string{"--max-tokens", "1", "--max-request-tokens", "1", "--max-sequences", "1",
			"--max-top-k", "1", "--max-wave-tokens", "1"}, func(c server.Config) bool {
			l := c.Limits
			return l.MaxSequenceTokens == 1 && l.MaxRequestTokens == 1 && l.MaxSequences == 1 && l.MaxTopK == 1 && l.MaxWaveTokens == 1
		}},
		{"body size with a unit", []string{"--max-body-bytes", "64MB"}, func(c server.Config) bool { return c.Limits.MaxBodyBytes == 64e6 }},
		{"body size in bytes", []string{"--max-body-bytes", "1048576"}, func(c server.Config) bool { return c.Limits.MaxBodyBytes == 1<<20 }},
		{"body size 0: the default", []string{"--max-body-bytes", "0"}, func(c server.Config) bool { return c.Limits.MaxBodyBytes == 0 }},
		{"gather 0: at once", []string{"--gather", "0"}, func(c server.Config) bool { return c.Gather < 0 }},
		{"engine counts", []string{"--expert-chunk", "0", "--prefetch-experts", "0"}, func(c server.Config) bool {
			return c.ExpertChunk == 0 && c.PrefetchExperts == 0
		}},
		{"shortest durations", []string{"--keep", "1ns", "--shutdown-timeout", "1ns", "--read-timeout", "1ns"}, func(c server.Config) bool {
			return c.Keep == 1 && c.ShutdownTimeout == 1 && c.ReadTimeout == 1
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := parseServeFlags(append([]string{"--model", t.TempDir(), "--spill", t.TempDir()}, tt.args...), io.Discard)
			if err != nil {
				t.Fatalf("parse %v: %v", tt.args, err)
			}
			cfg, err := f.config(context.Background())
			if err != nil {
				t.Fatalf("config %v: %v", tt.args, err)
			}
			if err := cfg.Validate(); err != nil {
				t.Errorf("Validate %v: %v", tt.args, err)
			}
			if !tt.want(cfg) {
				t.Errorf("%v: config %+v", tt.args, cfg)
			}
		})
	}
}
