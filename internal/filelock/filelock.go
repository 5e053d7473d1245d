// Package filelock holds advisory whole-file locks (flock on Unix) for the project's writers: a dataset
// job's directory, the service's spill directory, the notebook engine's start, a table set's or a
// synthetic model's staging folder, a replay's --out. The kernel drops such a lock when its process dies,
// kill -9 included, so a crash never leaves a stale lock, and a lock that can be taken means its last
// holder is gone: that is how a leftover of a killed writer is told from a live writer's work.
//
// Off Unix there is no flock: Supported is false, Acquire takes nothing (the caller must not run two writers
// at once) and Held and Abandoned say false, so nothing is removed on a guess.
package filelock

import "errors"

// ErrHeld is returned, wrapped with the path, by Acquire without waiting when another process holds the lock.
var ErrHeld = errors.New("filelock: held by another process")

// Supported reports whether locks are taken on this system.
const Supported = supported

// Lock is a held lock on a file, which stays open until Unlock.
type Lock struct {
	f interface{ Close() error }
}

// Unlock releases the lock (closing the file releases it). A nil Lock, or one already released, is left
// as it is.
func (l *Lock) Unlock() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// Acquire takes an exclusive lock on the file at path, creating it (mode perm) when it is missing: waiting
// for it when wait, else failing at once with an error wrapping ErrHeld when another process holds it.
func Acquire(path string, perm uint32, wait bool) (*Lock, error) { return lock(path, perm, wait) }

// Held reports whether another process holds a lock on path (false when there is no such file). It takes
// the lock for an instant when it is free, so it answers only for a moment: use it for reports, or where
// nothing may be starting to take the lock.
func Held(path string) bool { return held(path) }

// Abandoned reports whether path exists and no process holds a lock on it: its writer is gone. A missing
// file says nothing (a writer between making its folder and locking it), so it is false, as it is off Unix.
func Abandoned(path string) bool { return abandoned(path) }
