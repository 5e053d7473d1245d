package synth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/potato-k3/potato-k3/internal/diskspace"
	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/internal/staging"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// ErrSpace marks a dense write refused because the disk is too small for it.
var ErrSpace = errors.New("synth: not enough disk space")

// ErrExists marks a write refused because the target directory exists and is not empty.
var ErrExists = errors.New("synth: target exists")

// Options says what Write produces.
type Options struct {
	Preset string // tiny, small, k3-layer or k3-full (see Presets)
	Seed   uint64 // every byte of the directory is a function of (Preset, Layers, Seed)
	Layers int    // number of layers; 0: the preset's default
	// Sparse writes the headers and leaves the tensor data as holes (zeros that take no disk blocks): the
	// layout of the 1.56 TB release in a few hundred MB of headers and index, for audits and tests of
	// everything but the values.
	Sparse bool
	// Workers is the number of goroutines generating data; 0 means GOMAXPROCS.
	Workers int
	// Progress, when set, receives a line every ProgressEvery (default 2s) and a final one.
	Progress      io.Writer
	ProgressEvery time.Duration
}

// Write creates the model directory dir. It writes into a temporary sibling directory (".NAME.synth-"
// and digits, NAME dir's base name) and renames it to dir only when every file is complete and synced, so
// an interrupted or failed write never leaves a directory at dir that looks complete. An error return
// removes the temporary directory; one that a killed writer of the same dir left (kill -9, a crash) is
// removed by the next Write of dir before it counts the free space (internal/staging), and a
// live writer's is never touched. dir must not exist, or be empty.
func Write(ctx context.Context, dir string, o Options) (*Layout, error) {
	p, err := LookupPreset(o.Preset)
	if err != nil {
		return nil, err
	}
	plan, err := p.plan(o.Layers)
	if err != nil {
		return nil, err
	}
	if err := checkTarget(dir); err != nil {
		return nil, err
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	// What a writer of the same dir killed mid-write left (kill -9 skips the cleanup below) goes before
	// the space is counted: otherwise it would be counted against this write, and every one after.
	prefix := stagingPrefix(dir)
	staging.Sweep(parent, prefix, "")
	// The space a dense write needs is known from the plan before the layout (every tensor listed, in
	// memory) is built: the tensor data now, the headers with it after.
	if !o.Sparse {
		if err := checkSpace(dir, p.dataBytes(plan), p); err != nil {
			return nil, err
		}
	}
	l, err := p.layout(plan, o.Seed)
	if err != nil {
		return nil, err
	}
	if !o.Sparse {
		if err := checkSpace(dir, l.FileBytes(), p); err != nil {
			return nil, err
		}
	}
	st, err := staging.Mkdir(parent, prefix, "")
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	defer st.Release() // removes it unless it was renamed into place, and drops the owner lock
	tmp := st.Path
	if err := l.writeAll(ctx, tmp, o); err != nil {
		return nil, err
	}
	// The owner file goes before the directory's entries are synced and it is published: the directory
	// holds only the model's files (DirDigest hashes every one).
	if err := st.Disown(); err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	if err := syncPath(tmp); err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes it private
		return nil, fmt.Errorf("synth: %w", err)
	}
	// An empty target is replaced. If another writer publishes dir between these two steps (two processes
	// filling one cache), the rename fails and the caller learns that dir now exists.
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) && checkTarget(dir) == nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	if err := st.Rename(dir); err != nil {
		if terr := checkTarget(dir); errors.Is(terr, ErrExists) {
			return nil, terr
		}
		return nil, fmt.Errorf("synth: %w", err)
	}
	return l, nil
}

// checkTarget refuses a dir that exists with contents.
func checkTarget(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("synth: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("%w: %s is not empty", ErrExists, dir)
	}
	return nil
}

// stagingPrefix is the name of Write's temporary directories for dir, before MkdirTemp's digits.
func stagingPrefix(dir string) string { return "." + filepath.Base(dir) + ".synth-" }

// checkSpace refuses a dense write of dir that cannot fit, saying how much it needs, and naming the
// temporary directories of other writes of dir that hold some of the space: after the sweep those are a
// live writer's, or a killed one's from before owner files, which only a person can tell apart.
func checkSpace(dir string, need int64, p Preset) error {
	parent := filepath.Dir(filepath.Clean(dir))
	free, ok := diskspace.Free(parent)
	if !ok || free >= need+need/100 { // 1% slack for the small files and the file system
		return nil
	}
	hint := ""
	if p.NeedsSparse {
		hint = "; --sparse writes the same layout with the data as holes"
	}
	for _, d := range staging.Left(parent, stagingPrefix(dir), "") {
		hint += fmt.Sprintf("; %s (%s) is the temporary directory of another write of %s: remove it if none is running",
			d, numtext.Bytes(dirBytes(d)), dir)
	}
	return fmt.Errorf("%w: preset %s needs %s (%d bytes) and %s has %s free%s",
		ErrSpace, p.Name, numtext.Bytes(need), need, parent, numtext.Bytes(free), hint)
}

// writeAll writes every file of the directory into tmp, each synced; the caller syncs tmp itself.
func (l *Layout) writeAll(ctx context.Context, tmp string, o Options) error {
	cfg, err := l.configJSON()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "config.json"), cfg, 0o644); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	build, err := newBuilder(l.Plan, l.Seed, l.Preset.numBPE)
	if err != nil {
		return err
	}
	every := o.ProgressEvery
	if every <= 0 {
		every = 2 * time.Second
	}
	_, total := l.Totals()
	prog := newProgress(o.Progress, total, every)
	defer prog.finish()
	workers := o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	pool := &fillPool{workers: workers, build: build, progress: prog}
	for i := range l.Shards {
		if err := ctx.Err(); err != nil {
			return err
		}
		sh := &l.Shards[i]
		if err := writeShard(ctx, filepath.Join(tmp, sh.File), sh, o.Sparse, pool); err != nil {
			return fmt.Errorf("synth: %w", err)
		}
	}
	if err := l.writeIndex(tmp); err != nil {
		return fmt.Errorf("synth: %s: %w", "model.safetensors.index.json", err)
	}
	// The tokenizer package's builtin vocabulary: its first numBPE learned tokens (padded past 65,536),
	// then the 256 special slots at K3's offsets, matching text_config's bos/eos/pad ids.
	if err := tokenizer.WriteModelFiles(tmp, l.Preset.numBPE); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	// The shards synced themselves; the small files must be durable too before the rename publishes the
	// directory (Write syncs the directory's entries once the owner file is gone).
	for _, name := range []string{"config.json", tokenizer.ModelFile, tokenizer.ConfigFile} {
		if err := syncPath(filepath.Join(tmp, name)); err != nil {
			return fmt.Errorf("synth: %w", err)
		}
	}
	return nil
}

// syncPath flushes a file or directory to disk.
func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}
