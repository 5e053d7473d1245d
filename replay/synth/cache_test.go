package synth

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The generator's bytes for the embedded default are the ones DefaultDigest records: a change to them
// needs a new Version (and digest), or every cached default would read as damaged.
func TestDefaultDigest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if _, err := Write(context.Background(), dir, Options{Preset: DefaultPreset, Seed: DefaultSeed}); err != nil {
		t.Fatal(err)
	}
	if got, err := DirDigest(context.Background(), dir); err != nil || got != DefaultDigest {
		t.Errorf("DirDigest of a fresh default: -want %s +got %s (%v)", DefaultDigest, got, err)
	}
}

// A flipped bit in a cached model is found before use, warned about, and the directory written again;
// so is one in a cache that predates the digest file (the default, against DefaultDigest).
func TestCachedVerified(t *testing.T) {
	t.Setenv("POTATO_CACHE", t.TempDir())
	ctx := context.Background()
	for _, tt := range []struct {
		name         string
		seed         uint64
		removeDigest bool
	}{{"default", DefaultSeed, false}, {"default without its digest file", DefaultSeed, true}, {"seed 2", 2, false}} {
		t.Run(tt.name, func(t *testing.T) {
			var warn bytes.Buffer
			dir, err := CachedVerified(ctx, DefaultPreset, tt.seed, &warn)
			if err != nil {
				t.Fatal(err)
			}
			shard := filepath.Join(dir, "model-00002-of-000004.safetensors")
			good, err := os.ReadFile(shard)
			if err != nil {
				t.Fatal(err)
			}
			bad := bytes.Clone(good)
			bad[len(bad)/2] ^= 0x10
			os.WriteFile(shard, bad, 0o644)
			if tt.removeDigest {
				os.Remove(filepath.Join(dir, DigestFile))
			}
			again, err := CachedVerified(ctx, DefaultPreset, tt.seed, &warn)
			if err != nil || again != dir {
				t.Fatalf("after the flip: %s, %v", again, err)
			}
			if !strings.Contains(warn.String(), "is damaged (SHA-256 ") || !strings.Contains(warn.String(), "writing it again") {
				t.Errorf("warning: %q", warn.String())
			}
			if now, _ := os.ReadFile(shard); !bytes.Equal(now, good) {
				t.Errorf("the damaged shard was not written again")
			}
			warn.Reset()
			if _, err := CachedVerified(ctx, DefaultPreset, tt.seed, &warn); err != nil || warn.Len() != 0 {
				t.Errorf("a sound cache: %v, warned %q", err, warn.String())
			}
			if entries, _ := os.ReadDir(filepath.Dir(dir)); len(entries) > 3 {
				t.Errorf("cache holds %d entries: a damaged copy was left", len(entries))
			}
		})
	}
}

// A stopped check is neither a pass nor damage: the cached directory stays, and the error is the context's.
func TestCachedVerifiedStopped(t *testing.T) {
	t.Setenv("POTATO_CACHE", t.TempDir())
	dir, err := CachedVerified(context.Background(), DefaultPreset, DefaultSeed, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var warn strings.Builder
	if _, err := CachedVerified(ctx, DefaultPreset, DefaultSeed, &warn); !errors.Is(err, context.Canceled) {
		t.Errorf("stopped check: %v, want context.Canceled", err)
	}
	if warn.Len() != 0 {
		t.Errorf("stopped check warned: %q", warn.String())
	}
	if !complete(dir) {
		t.Errorf("stopped check removed %s", dir)
	}
	if _, err := DirDigest(ctx, dir); !errors.Is(err, context.Canceled) {
		t.Errorf("DirDigest stopped: %v", err)
	}
}
