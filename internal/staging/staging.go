// Package staging makes the temporary directories that the project's writers fill before they rename
// their work into place (a table set, a synthetic model, the demo model's cache), and clears away those
// that killed writers left. A writer holds a lock (internal/filelock) on an owner file inside its
// directory for as long as it lives; the lock goes with the process, kill -9 included, so Sweep can tell
// a directory a writer is still filling from one left behind for good (gigabytes, for a killed replay of
// a large table set or a killed synth).
package staging

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/potato-k3/potato-k3/internal/filelock"
)

// OwnerFile is the file inside a staging directory whose lock says a live writer holds it.
const OwnerFile = ".owner"

// Dir is a staging directory that this process is filling.
type Dir struct {
	Path      string // parent/prefix, random digits, suffix
	lock      *filelock.Lock
	published bool // renamed into place: Release has nothing to remove
}

// Mkdir creates a staging directory in parent named prefix, random digits and suffix (os.MkdirTemp's
// names, private to their owner) and holds it. The owner file appears in it already locked (it is locked
// under another name and then renamed; the lock belongs to the open file), so a sweep never finds a live
// writer's owner file free, even in the instant between creating and locking it; a writer killed before
// that leaves a directory without an owner file, which sweeps leave alone. Call Release when done,
// whatever happened.
func Mkdir(parent, prefix, suffix string) (*Dir, error) {
	path, err := os.MkdirTemp(parent, prefix+"*"+suffix)
	if err != nil {
		return nil, err
	}
	d := &Dir{Path: path}
	if filelock.Supported {
		staged := filepath.Join(path, OwnerFile+".new")
		if d.lock, err = filelock.Acquire(staged, 0o600, true); err == nil {
			err = os.Rename(staged, filepath.Join(path, OwnerFile))
		}
		if err != nil {
			d.Release()
			return nil, err
		}
	}
	return d, nil
}

// Disown removes the owner file, keeping its lock, so that the directory holds only what the writer put
// there: call it just before the directory is checked and renamed into place. Sweeps leave a directory
// without an owner file alone, so it stays safe until the rename.
func (d *Dir) Disown() error {
	if err := os.Remove(filepath.Join(d.Path, OwnerFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Rename renames the directory to newpath (os.Rename), publishing it; the lock is held until Release.
func (d *Dir) Rename(newpath string) error {
	if err := os.Rename(d.Path, newpath); err != nil {
		return err
	}
	d.published = true
	return nil
}

// Release removes the directory unless Rename published it, then drops the lock. Call it whatever
// happened; a second call does nothing.
func (d *Dir) Release() {
	if !d.published {
		os.RemoveAll(d.Path)
		d.published = true
	}
	d.lock.Unlock()
}

// Sweep removes the staging directories in parent that writers killed mid-write left behind: those named
// prefix, digits and suffix (Mkdir's names) whose owner file is there with its lock free. A directory a
// live writer holds is kept, and so is one without an owner file (a writer between making it and locking
// it, or one from an older build: Left lists them). Failures are ignored: a sweep is housekeeping, never a
// reason to refuse the new write. Off Unix nothing is removed (filelock.Abandoned).
func Sweep(parent, prefix, suffix string) {
	for _, p := range Left(parent, prefix, suffix) {
		if filelock.Abandoned(filepath.Join(p, OwnerFile)) {
			_ = os.RemoveAll(p)
		}
	}
}

// Left lists the staging directories in parent named prefix, digits and suffix: after a Sweep, those of
// live writers and those without an owner file. Names that merely begin like prefix are not taken
// (".m.synth-x.synth-5" is a write of "m.synth-x", not of "m").
func Left(parent, prefix, suffix string) []string {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return nil
	}
	var dirs []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if ok {
			rest, ok = strings.CutSuffix(rest, suffix)
		}
		if !e.IsDir() || !ok || rest == "" || strings.Trim(rest, "0123456789") != "" {
			continue
		}
		dirs = append(dirs, filepath.Join(parent, e.Name()))
	}
	return dirs
}
