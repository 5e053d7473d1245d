package synth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/potato-k3/potato-k3/internal/numtext"
)

// Version names the generator: bump it whenever the bytes a (preset, seed) produces change, so that cached
// default models and committed goldens made by an older generator are not mistaken for current ones.
const Version = 1

// DefaultPreset and DefaultSeed name the synthetic default: the synthetic model that the conditioning
// tests and `potato bench` start from, kept in the cache like any preset. The engine's embedded default
// (what it runs when no model directory is given) is the trained demo model of package demomodel.
const (
	DefaultPreset = "tiny"
	DefaultSeed   = 1
)

// CacheDir is where generated default models live: $POTATO_CACHE, else the user's cache directory
// (for example ~/.cache/potato-k3).
func CacheDir() (string, error) {
	if d := os.Getenv("POTATO_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("synth: no cache directory (set POTATO_CACHE): %w", err)
	}
	return filepath.Join(d, "potato-k3"), nil
}

// CachedVerified returns the directory of preset at seed in the cache, writing it on first use. Concurrent
// callers (two notebook cells, two processes) are safe: Write renames a complete directory into place
// atomically, and a loser of that race finds the winner's. It verifies the directory's bytes before use
// against the digest recorded when it was written (DigestFile; a cache from before digests were recorded
// is checked, for the embedded synthetic default, against DefaultDigest, compiled in): a damaged
// directory (a flipped bit, a truncated shard, a file removed or added) would otherwise change results
// without a word. A damaged one is removed and written again, with a line to warn (nil: none) naming what
// differed. Hashing the tiny default's 5 MB takes a few milliseconds; a directory past verifyAnnounce
// (k3-layer's 40 GB: half a minute or more) is announced on warn first, and ctx stops the hashing.
func CachedVerified(ctx context.Context, preset string, seed uint64, warn io.Writer) (string, error) {
	root, err := CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, fmt.Sprintf("%s-seed%d-gen%d", preset, seed, Version))
	if complete(dir) {
		if n := dirBytes(dir); n > verifyAnnounce && warn != nil {
			fmt.Fprintf(warn, "potato: checking the cached model %s (%s) against its recorded SHA-256 before use\n", dir, numtext.Bytes(n))
		}
		err := verify(ctx, dir, preset == DefaultPreset && seed == DefaultSeed)
		if err == nil {
			return dir, nil
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("synth: cache: checking %s: %w", dir, ctx.Err())
		}
		if err := RemoveDamaged(dir, err, warn); err != nil {
			return "", fmt.Errorf("synth: cache: %w", err)
		}
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("synth: cache: %w", err)
	}
	if _, err := Write(ctx, dir, Options{Preset: preset, Seed: seed}); err != nil {
		if errors.Is(err, ErrExists) && complete(dir) {
			return dir, nil
		}
		return "", err
	}
	digest, err := DirDigest(ctx, dir)
	if err == nil {
		err = writeDigest(dir, digest)
	}
	if err != nil {
		return "", fmt.Errorf("synth: cache: recording the digest of %s: %w", dir, err)
	}
	return dir, nil
}

// RemoveDamaged takes a cached model directory whose bytes failed their check (why) out of the way, so
// that the caller can write it again: a line to warn (nil: none) naming what differed, then the directory
// moved aside (a reader holding it keeps a whole copy) and removed.
func RemoveDamaged(dir string, why error, warn io.Writer) error {
	if warn != nil {
		fmt.Fprintf(warn, "potato: the cached model %s is damaged (%v): writing it again\n", dir, why)
	}
	aside := fmt.Sprintf("%s.damaged-%d", dir, os.Getpid())
	if err := os.Rename(dir, aside); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("moving the damaged %s aside: %w", dir, err)
	}
	os.RemoveAll(aside)
	return nil
}

// DefaultDigest is DirDigest of the synthetic default (preset tiny, seed 1, generator Version 1):
// recorded here so that a cached copy is checked against what the generator makes, not only against
// its own digest file (TestDefaultDigest writes the model and compares).
const DefaultDigest = "ca61718a95b4f8860be57aef12597fcd35d5703131e16d9251ecd6c31688d2ba"

// DigestFile is the file in a cached model directory that records DirDigest of the rest, written after
// the directory is complete.
const DigestFile = ".potato-sha256"

// verifyAnnounce is the size of a cached directory past which CachedVerified says it is checking it.
const verifyAnnounce = 1 << 30

// dirBytes is the size of dir's regular files (0 where it cannot be read: verify then says why).
func dirBytes(dir string) int64 {
	entries, _ := os.ReadDir(dir)
	var n int64
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
	}
	return n
}

// DirDigest is the hex SHA-256 over every regular file of dir but DigestFile, in sorted name order: each
// file's name, size and bytes. Subdirectories are not expected in a model directory and are refused.
// ctx stops it between reads (a full-shape model is tens of GB).
func DirDigest(ctx context.Context, dir string) (string, error) {
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, e := range entries {
		if e.Name() == DigestFile {
			continue
		}
		if !e.Type().IsRegular() {
			return "", fmt.Errorf("%s is not a regular file", e.Name())
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		info, err := f.Stat()
		if err == nil {
			fmt.Fprintf(h, "%s\x00%d\x00", e.Name(), info.Size())
			_, err = io.Copy(h, ctxReader{ctx, f})
		}
		f.Close()
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// verify checks dir against its digest file. Without one (a cache written before digests were kept, or
// by a process stopped in between) the default is checked against DefaultDigest and any other preset is
// rewritten, since nothing says what its bytes should be.
func verify(ctx context.Context, dir string, isDefault bool) error {
	got, err := DirDigest(ctx, dir)
	if err != nil {
		return err
	}
	recorded, err := os.ReadFile(filepath.Join(dir, DigestFile))
	if errors.Is(err, fs.ErrNotExist) {
		if !isDefault {
			return errors.New("no recorded digest")
		}
		if got != DefaultDigest {
			return fmt.Errorf("SHA-256 %s, want %s", got, DefaultDigest)
		}
		return writeDigest(dir, got)
	}
	if err != nil {
		return err
	}
	if want := strings.TrimSpace(string(recorded)); got != want {
		return fmt.Errorf("SHA-256 %s, recorded %s", got, want)
	}
	return nil
}

// ctxReader is r that fails with ctx's error once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// writeDigest records digest in dir's DigestFile, atomically.
func writeDigest(dir, digest string) error {
	tmp := filepath.Join(dir, DigestFile+".tmp")
	if err := os.WriteFile(tmp, []byte(digest+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, DigestFile))
}

// complete reports whether dir holds a model directory Write finished: config.json is written with the
// rest and the directory only appears by rename.
func complete(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "config.json"))
	return err == nil
}
