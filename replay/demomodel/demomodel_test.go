package demomodel

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay/synth"
)

// The embedded files are the ones Digest records.
func TestDigest(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir); err != nil {
		t.Fatal(err)
	}
	if got, err := synth.DirDigest(context.Background(), dir); err != nil || got != Digest {
		t.Errorf("DirDigest of the embedded files: -want %s +got %s (%v)", Digest, got, err)
	}
}

// A cached copy is used as it is, and a damaged one is written again with a warning.
func TestDirRewritesDamage(t *testing.T) {
	t.Setenv("POTATO_CACHE", t.TempDir())
	ctx := context.Background()
	var warn bytes.Buffer
	dir, err := Dir(ctx, &warn)
	if err != nil || warn.Len() != 0 {
		t.Fatalf("first Dir: %v, warned %q", err, warn.String())
	}
	if again, err := Dir(ctx, &warn); err != nil || again != dir || warn.Len() != 0 {
		t.Fatalf("second Dir: %s %v, warned %q; want %s and no warning", again, err, warn.String(), dir)
	}
	shard := filepath.Join(dir, "model-00002-of-000004.safetensors")
	b, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(shard, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if again, err := Dir(ctx, &warn); err != nil || again != dir || !strings.Contains(warn.String(), "damaged") {
		t.Fatalf("Dir after a flipped bit: %s %v, warned %q; want %s and a warning", again, err, warn.String(), dir)
	}
	if got, err := synth.DirDigest(context.Background(), dir); err != nil || got != Digest {
		t.Errorf("rewritten copy: DirDigest %s (%v), want %s", got, err, Digest)
	}
}
