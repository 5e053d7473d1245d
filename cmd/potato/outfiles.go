package main

// --out: checked before any compute (a known extension, a writable directory, no table path taken by a
// directory), held against a second replay of the same name, and written as one result set with the
// run's provenance.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/potato-k3/potato-k3/internal/filelock"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// lockOut holds --out for this replay from before its engine opens until its tables are written
// (internal/filelock, on ".NAME.lock" beside it): a second replay of the same --out is refused at once,
// where both used to run and one's tables silently replaced the other's. The lock file goes at the end;
// a replay that opened it in that instant may still run beside a third, which this guard against a
// mistake does not try to prevent.
func lockOut(out string) (unlock func(), err error) {
	dir, base := filepath.Split(out)
	if dir == "" {
		dir = "."
	}
	path := filepath.Join(dir, "."+base+".lock")
	l, err := filelock.Acquire(path, 0o644, false)
	if errors.Is(err, filelock.ErrHeld) {
		return nil, fmt.Errorf("replay: --out %s is being written by another replay (it holds %s): wait for it to finish, or give another name", out, path)
	}
	if err != nil {
		return nil, fmt.Errorf("replay: --out %s: %w", out, err)
	}
	return func() {
		os.Remove(path)
		l.Unlock()
	}, nil
}

// checkReplayOut is checkOut for replay's --out, which also names a dataset job's directory: an --out
// without an extension is most likely one, and the error says how a directory is given (DIR/, or one that
// exists) and that it needs --chat.
func checkReplayOut(out string, chat bool) error {
	switch {
	case isJobDir(out):
		return fmt.Errorf("replay: --out %s names a directory: that is a dataset job, which replays --chat (a file of conversations); give --out FILE.arrow, .arrows or .parquet for --text, --text-file or --tokens", out)
	case filepath.Ext(out) == "" && chat:
		return fmt.Errorf("replay: --out %s has no extension: give FILE.arrow, .arrows or .parquet, or for a dataset job its directory as %s/ (a trailing slash) or an existing directory", out, out)
	}
	if err := checkOut(out); err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	return nil
}

// checkOut checks --out before any compute: a known extension, and a directory that exists and takes a
// new file (a probe file is created and removed).
func checkOut(out string) error {
	if _, err := tables.FormatOf(out); err != nil {
		return fmt.Errorf("--out %s: unknown extension %q (want .arrow, .arrows or .parquet)", out, filepath.Ext(out))
	}
	if base := filepath.Base(out); base == filepath.Ext(base) { // --out .arrow wrote the hidden file .tokens.arrow
		return fmt.Errorf("--out %s: no file name before the extension (the tables would be hidden files such as .tokens%s): give NAME%s", out, base, base)
	}
	dir := filepath.Dir(out)
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("--out %s: directory %s does not exist", out, dir)
	}
	if !info.IsDir() {
		return fmt.Errorf("--out %s: %s is not a directory", out, dir)
	}
	probe, err := os.CreateTemp(dir, ".potato-out-check-*")
	if err != nil {
		return fmt.Errorf("--out %s: directory %s is not writable: %w", out, dir, errors.Unwrap(err))
	}
	probe.Close()
	os.Remove(probe.Name())
	// Every table file of the set is replaced, or removed when this run does not capture its table: one
	// that is a directory failed the write after the whole replay ("rename ...: file exists").
	for _, name := range tables.TableNames {
		if p := tables.TablePath(out, name); isDir(p) {
			return fmt.Errorf("--out %s: %s is a directory, where the %s table would be written: move it, or give another name", out, p, name)
		}
	}
	return nil
}

// isDir reports whether path names a directory (following links).
func isDir(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.IsDir()
}

// writeTables writes results as one result set (tables.WriteSet: all tables or none), with provenance
// metadata on every table and the top-k ids named by the tokenizer when the model has one. ctx (the
// command's: Ctrl-C) stops the write between record batches, leaving --out as it was.
func writeTables(ctx context.Context, stdout io.Writer, l *loaded, req *replay.Request, res []replay.Result, out string, float16 bool) error {
	opts := tables.Options{HiddenFloat16: float16, Metadata: provenance(l, req)}
	if l.tok != nil {
		opts.Piece = l.tok.Piece
	}
	set, err := tables.Build(res, opts)
	if err != nil {
		return err
	}
	defer set.Release()
	paths, err := tables.WriteSet(ctx, out, set)
	if err != nil {
		return err
	}
	for _, p := range paths {
		fmt.Fprintln(stdout, "wrote", p)
	}
	return nil
}

// provenance is the metadata every table of one CLI run carries (tables.ProvenanceKeys).
func provenance(l *loaded, req *replay.Request) map[string]string {
	return map[string]string{
		tables.MetaResultSet: tables.NewSetID(), tables.MetaRequestHash: req.Hash(),
		tables.MetaConfigHash: l.engine.ConfigSHA256, tables.MetaWeightsHash: l.engine.WeightsSHA256, tables.MetaEngine: replay.Version,
		tables.MetaPrecision: l.precision.String(), tables.MetaBackend: l.backend,
	}
}
