package synth

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ownerFile is the file inside a staging directory whose flock says a live writer holds it (the same
// scheme as package tables' result-set staging).
const ownerFile = ".owner"

// Staging is a temporary directory that a live writer is filling before it renames it into place. The
// writer holds an exclusive flock on the owner file inside it for as long as it lives: the kernel drops
// the lock when the process dies, kill -9 included, so SweepStaging can tell a directory a writer is
// still filling from one a killed writer left behind (for good, otherwise: a killed `potato synth` of the
// small preset leaves 200 MB, which the next run's free-space check then counts against it).
type Staging struct {
	Dir       string // the directory, parent/prefix followed by os.MkdirTemp's random digits
	lock      *os.File
	published bool // renamed into place: Release has nothing to remove
}

// MkdirStaging creates a staging directory in parent named prefix and random digits, private to its
// owner (os.MkdirTemp's mode), and holds it. The owner file appears in it already locked (it is locked
// under another name and renamed), so a sweep never sees it free while this writer lives; a writer killed
// before that leaves a directory without an owner file, which sweeps leave alone. The caller calls
// Release when done, whatever happened.
func MkdirStaging(parent, prefix string) (*Staging, error) {
	dir, err := os.MkdirTemp(parent, prefix+"*")
	if err != nil {
		return nil, err
	}
	lock, err := holdOwner(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &Staging{Dir: dir, lock: lock}, nil
}

// Disown removes the owner file, keeping the lock on it, so that the directory holds only what the writer
// put there: call it just before the directory is checked and renamed into place. A sweep leaves a
// directory without an owner file alone, so the directory stays safe until the rename.
func (s *Staging) Disown() error {
	if err := os.Remove(filepath.Join(s.Dir, ownerFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Rename renames the directory to newpath (os.Rename), publishing it. The lock is still held until
// Release.
func (s *Staging) Rename(newpath string) error {
	if err := os.Rename(s.Dir, newpath); err != nil {
		return err
	}
	s.published = true
	return nil
}

// Release removes the directory unless Rename published it (the write failed or stopped), then drops the
// lock. Call it whatever happened.
func (s *Staging) Release() {
	if !s.published {
		os.RemoveAll(s.Dir)
	}
	if s.lock != nil {
		s.lock.Close()
	}
}

// SweepStaging removes the staging directories in parent that writers killed mid-write left behind:
// those named prefix and digits (MkdirStaging's names) whose owner file is there with its flock free. A
// directory a live writer holds is kept, and so is one without an owner file (a writer between making it
// and locking it, or one from before owner files: LeftStaging lists them). Failures are ignored: the sweep
// is housekeeping, never a reason to refuse the new write. Where flock is missing nothing is removed.
func SweepStaging(parent, prefix string) {
	for _, p := range stagingDirs(parent, prefix) {
		if abandoned(p) {
			_ = os.RemoveAll(p)
		}
	}
}

// LeftStaging lists the staging directories in parent named prefix and digits: after SweepStaging, those
// of live writers and those without an owner file.
func LeftStaging(parent, prefix string) []string { return stagingDirs(parent, prefix) }

// stagingDirs lists parent's directories named prefix followed by digits only (os.MkdirTemp's random
// part), so that the staging directories of a name that merely starts like prefix are not taken.
func stagingDirs(parent, prefix string) []string {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return nil
	}
	var dirs []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !e.IsDir() || !ok || rest == "" || strings.Trim(rest, "0123456789") != "" {
			continue
		}
		dirs = append(dirs, filepath.Join(parent, e.Name()))
	}
	return dirs
}
