package kernel

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/potato-k3/potato-k3/internal/filelock"
)

// Claims are the cross-process half of ReplayCached's one-submission rule (flight.go is the in-process
// half). Before it submits, a call claims the results entry by creating claimName in the entry's
// directory exclusively (a hard link of a complete temporary file, which fails when the name exists, so
// that the claim is never seen without its content); it then looks again for a stored entry or a
// pending job (another call may have finished between its first look and its claim), submits, writes
// pending.json and removes the claim. A call that finds the entry claimed waits (awaitClaim) until the
// claim is gone or a new pending.json appears, then waits for the job that names.
//
// A claim spans one submission (an HTTP request the engine answers at once), so one that stays is the
// leftover of a process that died in between. It is stale, and the next call takes it over with a line
// on stderr, when its process is gone (same host name and the pid no longer exists; this needs a system
// where a pid can be probed, Unix) or when it is older than claimStale by its modification time (any
// host: another machine sharing the cache directory, a pid since reused). A process that died after its
// submission was answered but before it wrote pending.json leaves a job that nobody names: the call that
// takes over submits again, as every call did before claims.

// claimName is the file that claims an entry for a submission.
const claimName = "claim.json"

// claimStale is how old a claim may grow before another call takes it over; a variable for the tests.
var claimStale = 2 * time.Minute

// claimPoll bounds awaitClaim's polling interval: it starts at the first and doubles to the second.
var claimPoll = [2]time.Duration{20 * time.Millisecond, 500 * time.Millisecond}

// claimRecord is the content of claimName.
type claimRecord struct {
	PID     int       `json:"pid"`
	Host    string    `json:"host"`
	Created time.Time `json:"created"`
	Token   string    `json:"token"` // random: tells this claim from a later one at the same path
}

// errClaimed: another call holds the entry's claim.
var errClaimed = errors.New("kernel: results entry claimed by another call")

// claim is a held claim.
type claim struct{ path, token string }

// claimEntry claims entry for a submission: errClaimed when another call holds it, another error when
// the claim cannot be made (the cache is not writable).
func claimEntry(entry string) (*claim, error) {
	if err := os.MkdirAll(entry, 0o700); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	cl := &claim{path: filepath.Join(entry, claimName), token: rand.Text()}
	data, err := json.Marshal(claimRecord{PID: os.Getpid(), Host: host, Created: time.Now().UTC(), Token: cl.token})
	if err != nil {
		return nil, err
	}
	tmp, err := writeTemp(entry, ".claim-", data)
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp)
	err = os.Link(tmp, cl.path)
	if errors.Is(err, fs.ErrExist) {
		return nil, errClaimed
	}
	if err != nil {
		// No hard links on this file system (some network and FUSE ones): create the name exclusively
		// and write it; a reader that catches it empty sees no owner and goes by its age.
		f, err := os.OpenFile(cl.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return nil, errClaimed
		}
		if err != nil {
			return nil, err
		}
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(cl.path)
			return nil, err
		}
	}
	return cl, nil
}

// release removes the claim, unless it is no longer this one (taken over as stale).
func (cl *claim) release() {
	if rec, err := readClaim(cl.path); err == nil && rec.Token == cl.token {
		os.Remove(cl.path)
	}
}

// readClaim reads the claim at path.
func readClaim(path string) (claimRecord, error) {
	var rec claimRecord
	data, err := os.ReadFile(path)
	if err != nil {
		return rec, err
	}
	return rec, json.Unmarshal(data, &rec)
}

// awaitClaim waits while another call holds entry's claim: until the claim is gone (its holder wrote
// pending.json, or failed), a pending.json other than the one there when it began appears (a holder
// that names its job before it releases), or the claim is stale, which it then takes over, saying so on
// say. It polls from claimPoll[0], doubling up to claimPoll[1], so it is bounded by claimStale and the
// last interval. When ctx ends first it returns ctx's error, and has submitted nothing.
func awaitClaim(ctx context.Context, entry string, say io.Writer) error {
	path := filepath.Join(entry, claimName)
	before, _ := os.ReadFile(filepath.Join(entry, pendingName))
	for d := claimPoll[0]; ; d = min(2*d, claimPoll[1]) {
		info, err := os.Stat(path)
		if err != nil {
			return nil // released; claimEntry says what else it could be
		}
		if now, _ := os.ReadFile(filepath.Join(entry, pendingName)); len(now) > 0 && !bytes.Equal(now, before) {
			return nil
		}
		if why, _ := staleClaim(path, info); why != "" {
			why, took := takeOverStale(entry, path)
			if took {
				fmt.Fprintf(say, "kernel: ReplayCached: taking over the claim %s, which named no job and %s; submitting the request\n", path, why)
			}
			if took || why != "" {
				return nil // taken over, by this call or another: claim again
			}
			// judged again under the take-over lock, the claim is gone or another call's fresh one
		}
		if !sleep(ctx, d) {
			return fmt.Errorf("kernel: ReplayCached: waiting for another call to submit this request (it holds %s); nothing submitted: %w", path, ctx.Err())
		}
	}
}

// staleClaim says why the claim at path, as info describes it, is stale, or "" when it is not: its
// process is gone (same host, a pid that no longer exists), or it is older than claimStale. It returns
// the content it judged, for takeOver.
func staleClaim(path string, info fs.FileInfo) (why string, data []byte) {
	data, _ = os.ReadFile(path)
	var rec claimRecord
	json.Unmarshal(data, &rec) // unreadable or half written: no owner, only the age tells
	host, _ := os.Hostname()
	// alive of our own pid is false where pids cannot be probed (off Unix): then only the age tells.
	if rec.PID > 0 && host != "" && rec.Host == host && alive(os.Getpid()) && !alive(rec.PID) {
		return fmt.Sprintf("its process (pid %d on this host) is gone", rec.PID), data
	}
	if age := time.Since(info.ModTime()); age > claimStale {
		return fmt.Sprintf("is %s old (stale after %s)", age.Round(time.Second), claimStale), data
	}
	return "", data
}

// takeOverName is the lock file (internal/filelock) that serializes the take-overs of an entry's claim
// among the processes of one host; a dot file, never a results file, left in place as lock files are.
const takeOverName = ".claim-takeover.lock"

// takeOverStale takes over the claim at path (in entry) when, judged again while holding entry's
// take-over lock, it is still stale, and says why it was and whether this call took it over ("": gone,
// or fresh now). Judged before the lock, a claim may have been taken over and claimed afresh by another
// call meanwhile: under the lock only a claim that is stale now is moved, so on one host no call moves
// another's fresh claim aside (takeOver's races). Where no lock can be taken (off Unix, a file system
// without flock) it goes on without one, as takeOver alone did.
func takeOverStale(entry, path string) (why string, took bool) {
	if filelock.Supported {
		if l, err := filelock.Acquire(filepath.Join(entry, takeOverName), 0o600, true); err == nil {
			defer l.Unlock()
		}
	}
	info, err := os.Stat(path)
	if err != nil {
		return "", false
	}
	why, data := staleClaim(path, info)
	if why == "" {
		return "", false
	}
	return why, takeOver(path, info, data)
}

// takeOver removes the stale claim at path that seen and data (its content) describe, and reports
// whether it did. Two calls may judge one claim stale at once: each moves the name aside (one of them
// gets the stale file) and checks that the file it moved is the one it judged, by its identity, time and
// content (a new file may reuse a removed one's inode, but not its random token); the other has moved
// the winner's fresh claim, and puts it back. takeOverStale's lock keeps the calls of one host from
// judging at once; where it does not reach (hosts whose file system keeps flock local, or no locks) two
// races are left, both needing a dead process to begin and a second call's take-over in the same
// instant: should a third call claim the name while the fresh claim is aside, it stays aside and its
// holder and the third call both submit; should its holder release it while it is aside, release finds
// nothing to remove and the claim comes back after the release, to hold the entry until it is
// claimStale old (the holder's process is alive).
func takeOver(path string, seen fs.FileInfo, data []byte) bool {
	aside := path + ".stale-" + rand.Text()
	if os.Rename(path, aside) != nil {
		return false // gone already: released, or taken over by another call
	}
	got, err := os.Stat(aside)
	now, rerr := os.ReadFile(aside)
	if err == nil && rerr == nil && os.SameFile(got, seen) && got.ModTime().Equal(seen.ModTime()) && bytes.Equal(now, data) {
		os.Remove(aside)
		return true
	}
	if err := os.Link(aside, path); err != nil && !errors.Is(err, fs.ErrExist) {
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			os.Rename(aside, path) // no hard links here: rename it back while the name is free
			return false
		}
	}
	os.Remove(aside)
	return false
}

// replaceFile writes data to dir/name through a temporary file renamed over it, so that a reader finds
// the old content or the new, never part of it.
func replaceFile(dir, name string, data []byte) error {
	tmp, err := writeTemp(dir, ".tmp-", data)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// writeTemp writes data to a new file in dir whose name begins with prefix, and returns its path.
func writeTemp(dir, prefix string, data []byte) (string, error) {
	f, err := os.CreateTemp(dir, prefix+"*")
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}
