package demomodel

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/potato-k3/potato-k3/internal/staging"
	"github.com/potato-k3/potato-k3/replay/synth"
)

// files is the checkpoint directory, committed under model/ (PROVENANCE.md beside this file says how it
// was made).
//
//go:embed model
var files embed.FS

// Digest is synth.DirDigest of the demo model's directory: the embedded files must produce it
// (TestDigest), and a cached copy is checked against it before every use, so a flipped bit in the cache
// can never change results silently.
const Digest = "d0360373fa3d8b5b883a8ca9807665b780e6acad0ff6427e5381ee1fb1ea33ea"

// ErrDamaged is matched (errors.Is) by Dir's error when even a freshly written copy does not match Digest.
var ErrDamaged = errors.New("demomodel: the written model does not match its digest")

// Name says what the embedded default is, for the line a command prints when it uses it.
const Name = "the demo model: a small K3 trained on real text (replay/demomodel)"

// stagingPrefix names Dir's temporary directories in the cache root, before their random digits.
const stagingPrefix = ".demo-tmp-"

// Dir returns the directory of the demo model in the cache (synth.CacheDir), writing it there on first
// use. A cached copy whose bytes differ from Digest (a flipped bit, a truncated shard, a file removed or
// added) is removed and written again, with a line to warn (nil: none) naming what differed. Concurrent
// callers are safe: the directory is written under a temporary name (".demo-tmp-" and digits, held by its
// writer's lock: internal/staging) and renamed into place, and a loser of that race finds the winner's.
// Every call first removes the temporary directories that writers killed mid-write left in the cache root
// (5 MB each, for good otherwise), never one a live writer holds.
func Dir(ctx context.Context, warn io.Writer) (string, error) {
	root, err := synth.CacheDir()
	if err != nil {
		return "", err
	}
	// Every call, not only a write: a writer killed while another process published the copy leaves its
	// directory beside a cache that is never written again.
	staging.Sweep(root, stagingPrefix, "")
	dir := filepath.Join(root, "demo-"+Digest[:16])
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
		got, err := synth.DirDigest(ctx, dir)
		if err == nil && got == Digest {
			return dir, nil
		}
		if ctx.Err() != nil { // stopped, not damaged: keep it
			return "", ctx.Err()
		}
		if err == nil {
			err = fmt.Errorf("SHA-256 %s, want %s", got, Digest)
		}
		if err := synth.RemoveDamaged(dir, err, warn); err != nil {
			return "", fmt.Errorf("demomodel: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("demomodel: cache: %w", err)
	}
	st, err := staging.Mkdir(root, stagingPrefix, "")
	if err != nil {
		return "", fmt.Errorf("demomodel: cache: %w", err)
	}
	defer st.Release() // removes it unless it was renamed into place, and drops the owner lock
	tmp := st.Path
	if err := Write(tmp); err != nil {
		return "", err
	}
	if err := st.Disown(); err != nil { // the owner file is not the model's: out before the digest
		return "", fmt.Errorf("demomodel: cache: %w", err)
	}
	if got, err := synth.DirDigest(ctx, tmp); err != nil || got != Digest {
		return "", fmt.Errorf("%w: SHA-256 %s, want %s (%v)", ErrDamaged, got, Digest, err)
	}
	if err := st.Rename(dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "config.json")); serr == nil {
			return dir, nil // another process won the race
		}
		return "", fmt.Errorf("demomodel: cache: %w", err)
	}
	return dir, nil
}

// Write copies the embedded checkpoint files into the existing directory dir.
func Write(dir string) error {
	entries, err := files.ReadDir("model")
	if err != nil {
		return fmt.Errorf("demomodel: %w", err)
	}
	for _, e := range entries {
		b, err := files.ReadFile("model/" + e.Name())
		if err != nil {
			return fmt.Errorf("demomodel: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			return fmt.Errorf("demomodel: %w", err)
		}
	}
	return nil
}
