package synth

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Version names the generator: bump it whenever the bytes a (preset, seed) produces change, so that cached
// default models and committed goldens made by an older generator are not mistaken for current ones.
const Version = 1

// DefaultPreset and DefaultSeed name the embedded default model: what the engine runs when no model
// directory is given (no GPU, no downloaded weights).
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

// Cached returns the directory of preset at seed in the cache, writing it on first use. Concurrent callers
// (two notebook cells, two processes) are safe: Write renames a complete directory into place atomically,
// and a loser of that race finds the winner's.
func Cached(ctx context.Context, preset string, seed uint64) (string, error) {
	root, err := CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, fmt.Sprintf("%s-seed%d-gen%d", preset, seed, Version))
	if complete(dir) {
		return dir, nil
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
	return dir, nil
}

// Default returns the embedded default model's directory, writing it into the cache on first use.
func Default(ctx context.Context) (string, error) { return Cached(ctx, DefaultPreset, DefaultSeed) }

// complete reports whether dir holds a model directory Write finished: config.json is written with the
// rest and the directory only appears by rename.
func complete(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "config.json"))
	return err == nil
}
