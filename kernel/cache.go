package kernel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// The results cache: every GoNB cell is a new program, so a value computed in one cell is gone in the
// next; ReplayCached keeps each result on disk under a key of the request and the engine's model, so
// the cells of a notebook that ask the same question replay it once. It lives in
// CacheDir()/kernel/results, one directory per key holding status.json and one Arrow IPC stream per table
// (readable by pyarrow.ipc.open_stream), or, while its job runs, pending.json (and, for the moment of a
// submission, claim.json: claim.go). Nothing expires it; delete the directory to start over.

// resultsDir is the results cache's directory.
const resultsDir = "results"

// pendingName is the file in an entry's directory that names the job submitted for it, written before
// ReplayCached waits, so that a call whose context ends mid-job leaves the job findable and the next call
// waits for it instead of replaying it twice; a call that lost the claim to submit (claim.go) waits for
// the job it names too. Storing the entry removes it, after status.json is in place, so that the entry
// always shows one or the other. The format stays "potato-kernel-results-1": an entry with status.json
// reads as before, and a client that knows neither pending.json nor claim.json takes a directory without
// status.json for a miss, as it did (it submits, and its store replaces the directory, both files with it).
const pendingName = "pending.json"

// pending is the content of pendingName.
type pending struct {
	Job string `json:"job"` // the job's id on the engine it was submitted to
}

// ReplayCached is Replay, except that a request equal to one made before, to an engine on the same model
// (config hash, engine version, backend, default precision and model directory, from Info), returns the
// result stored then, read from disk, with FromCache set: no second replay. Anything else replays and
// stores the result. A damaged entry is replayed again and overwritten.
//
// If ctx ends while the job runs, the job goes on in the engine, and the next ReplayCached of the same
// request waits for that job and fetches it rather than submitting it again (its id is kept in the
// entry's directory), as long as the engine still has it queued, running or done; one it no longer knows
// (another engine, forgotten, expired), or that failed or was cancelled, is submitted anew.
//
// Calls of the same request at the same time submit it once. Those of one client (goroutines) wait for
// the first and return what it returns: the stored entry (FromCache), or its result when that could
// not be stored, or its error, unless that was the end of its own context, when they carry on with its
// job. Other clients and processes sharing the cache directory (two cells, two GoNB kernels) wait for
// the one that claimed the entry to name its job, then wait for that job and fetch it. A waiter whose
// ctx ends returns ctx's error, and the call it waited for carries on.
//
// It fails as Replay does (the error for an ended ctx says that a repeated call waits for the job), and
// when Info fails or the cache directory cannot be made; a result that cannot be stored is still
// returned, with one warning a client on stderr.
func (c *Client) ReplayCached(ctx context.Context, args ...Arg) (*Result, error) {
	req, err := buildRequest(args)
	if err != nil {
		return nil, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := stateDir()
	if err != nil {
		return nil, err
	}
	entry := filepath.Join(dir, resultsDir, cacheKey(req, info))
	for {
		if r, err := readCached(entry); err == nil {
			return r, nil
		}
		f, leader := c.flights.join(entry)
		if leader {
			return c.lead(ctx, f, entry, req, info)
		}
		shared, carryOn, err := c.flights.wait(ctx, f)
		switch {
		case shared != nil:
			if r, err := readCached(entry); err == nil {
				shared.Release()
				return r, nil
			}
			return shared, nil // it could not be stored: the first call's tables
		case !carryOn:
			return nil, err
		}
	}
}

// lead is ReplayCached's call for entry while it leads flight f, which it lands however it returns.
func (c *Client) lead(ctx context.Context, f *flight, entry string, req api.Request, info api.Info) (r *Result, err error) {
	defer func() { c.flights.land(entry, f, r, err, err != nil && ctx.Err() != nil) }()
	id, r, err := c.jobFor(ctx, entry, req, info)
	if r != nil || err != nil {
		return r, err
	}
	if _, err := c.Wait(ctx, id); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w; ReplayCached with the same request waits for this job rather than submit it again", err)
		}
		return nil, err
	}
	r, err = c.Fetch(ctx, id)
	if err != nil {
		return nil, err
	}
	// Stored, the entry's pending file goes; not stored, it stays, and the next call fetches the done
	// job again (while the engine keeps it) instead of replaying.
	if err := writeCached(entry, r); err != nil {
		c.warnCache(err)
	}
	return r, nil
}

// jobFor is the job whose result entry is to hold: one submitted earlier and still on the engine
// (resumable), else one that another call, holding the entry's claim, submits meanwhile, else one this
// call claims the entry for and submits. It returns the stored entry instead when another call stored it
// meanwhile.
func (c *Client) jobFor(ctx context.Context, entry string, req api.Request, info api.Info) (string, *Result, error) {
	for {
		id, err := c.resumable(ctx, entry, req, info)
		if err != nil || id != "" {
			return id, nil, err
		}
		cl, err := claimEntry(entry)
		switch {
		case err == nil:
			id, r, err := c.submitClaimed(ctx, entry, req, info)
			cl.release()
			return id, r, err
		case errors.Is(err, errClaimed):
			if err := awaitClaim(ctx, entry, cacheWarnings); err != nil {
				return "", nil, err
			}
			if r, err := readCached(entry); err == nil {
				return "", r, nil
			}
		default:
			// No claim can be made, and likely no entry stored: submit unguarded, as before claims.
			c.warnCache(err)
			id, err := c.submitPending(ctx, entry, req)
			return id, nil, err
		}
	}
}

// submitClaimed submits req for entry, whose claim the caller holds, unless the entry was stored or a
// job named for it between the caller's first look and its claim.
func (c *Client) submitClaimed(ctx context.Context, entry string, req api.Request, info api.Info) (string, *Result, error) {
	if r, err := readCached(entry); err == nil {
		return "", r, nil
	}
	id, err := c.resumable(ctx, entry, req, info)
	if err != nil || id != "" {
		return id, nil, err
	}
	id, err = c.submitPending(ctx, entry, req)
	return id, nil, err
}

// submitPending submits req and names its job in entry's pending file.
func (c *Client) submitPending(ctx context.Context, entry string, req api.Request) (string, error) {
	st, err := c.submit(ctx, req)
	if err != nil {
		return "", err
	}
	if err := writePending(entry, st.ID); err != nil {
		c.warnCache(err) // the job runs all the same; only a repeated call after a timeout submits again
	}
	return st.ID, nil
}

// warnCache says once a client, on stderr (a notebook cell shows it), that the results cache could not
// be written: the result is good, only the cache failed, and the next call replays again; better said
// once than every call replaying without a word.
func (c *Client) warnCache(err error) {
	c.cacheWarned.Do(func() {
		fmt.Fprintf(cacheWarnings, "kernel: ReplayCached could not store a result (%v); results are not cached and each call replays\n", err)
	})
}

// resumable is the job that entry's pending file names, when the engine has it queued, running or done
// and it is req's (the same options, label, number of sequences and config hash): the job an earlier
// ReplayCached submitted and stopped waiting for. It is "" when there is no such job; an error only when
// ctx ends while it asks the engine.
func (c *Client) resumable(ctx context.Context, entry string, req api.Request, info api.Info) (string, error) {
	data, err := os.ReadFile(filepath.Join(entry, pendingName))
	if err != nil {
		return "", nil
	}
	var p pending
	if json.Unmarshal(data, &p) != nil || p.Job == "" {
		return "", nil // a damaged pending file: submit anew, and overwrite it
	}
	st, err := c.Status(ctx, p.Job)
	if ctx.Err() != nil {
		return "", fmt.Errorf("kernel: ReplayCached: asking for job %s, submitted earlier for this request: %w", p.Job, err)
	}
	if err != nil || !sameRequest(st, req, info) {
		return "", nil // unknown to this engine (404), or not this request's: submit anew
	}
	switch st.State {
	case api.StateQueued, api.StateRunning, api.StateDone:
		return p.Job, nil
	}
	return "", nil // failed or cancelled: asking again means trying again
}

// sameRequest reports whether job st, as the engine describes it, is one of req on info's model. The
// engine's status has no hash of the inputs; the options, label, count of inputs and config hash guard
// against a pending file that names a job of another request (an id reused across engines is as
// unlikely as two random 64-bit ids agreeing).
func sameRequest(st api.JobStatus, req api.Request, info api.Info) bool {
	a, errA := json.Marshal(st.Options)
	b, errB := json.Marshal(req.Options)
	return errA == nil && errB == nil && string(a) == string(b) && st.Label == req.Label &&
		st.Sequences == len(req.Inputs) && (st.ConfigSHA256 == "" || st.ConfigSHA256 == info.ConfigSHA256)
}

// writePending records in entry's directory that job id was submitted for it: a temporary file renamed
// into place, so that a reader never takes a half-written record for a damaged one.
func writePending(entry, id string) error {
	if err := os.MkdirAll(entry, 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(pending{Job: id})
	if err != nil {
		return err
	}
	return replaceFile(entry, pendingName, data)
}

// cacheWarnings receives ReplayCached's one warning a client when a result could not be stored, and the
// line that says a stale claim was taken over (tests read it).
var cacheWarnings io.Writer = os.Stderr

// cacheKey is the hex SHA-256 of the request and what identifies the model the engine runs.
func cacheKey(req api.Request, info api.Info) string {
	data, _ := json.Marshal(struct {
		Request                                                             api.Request
		Config, Weights, Engine, Backend, Precision, Model, CacheFormatName string
	}{req, info.ConfigSHA256, info.WeightsSHA256, info.EngineVersion, info.Backend, info.Precision, info.ModelDir, "potato-kernel-results-1"})
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}

// readCached reads the entry at dir.
func readCached(dir string) (*Result, error) {
	data, err := os.ReadFile(filepath.Join(dir, "status.json"))
	if err != nil {
		return nil, err
	}
	r := &Result{tables: map[string]arrow.RecordBatch{}, FromCache: true}
	if err := json.Unmarshal(data, &r.Status); err != nil {
		return nil, err
	}
	for _, name := range r.Status.Tables {
		if !slices.Contains(api.Tables, name) {
			r.Release()
			return nil, fmt.Errorf("kernel: results cache %s: unknown table %q", dir, name)
		}
		rec, err := readTableFile(filepath.Join(dir, name+".arrows"))
		if err != nil {
			r.Release()
			return nil, err
		}
		r.tables[name] = rec
	}
	if r.Tokens() == nil {
		r.Release()
		return nil, errors.New("kernel: results cache entry without a tokens table")
	}
	if err := r.checkRows(); err != nil { // a stream cut short cleanly, or a status of another entry
		r.Release()
		return nil, fmt.Errorf("kernel: results cache %s: %w", dir, err)
	}
	return r, nil
}

// readTableFile reads one Arrow IPC stream file into one record.
func readTableFile(path string) (arrow.RecordBatch, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rec, err := readStream(f)
	if err != nil {
		return nil, fmt.Errorf("kernel: %s: %w", path, err)
	}
	return rec, nil
}

// writeCached stores r at dir. Each file is written under a temporary name and renamed into place,
// status.json last, so that a reader never sees half an entry; the directory is kept, not replaced, so
// that its pending.json names the job until status.json is there and a call that looks in between
// waits for that job rather than submitting it again. A status.json of another job (a damaged entry
// replayed) goes first; one of this job (a second call that waited for the same job) stays, since the
// files that replace its own are the same.
func writeCached(dir string, r *Result) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	statusPath := filepath.Join(dir, "status.json")
	if data, err := os.ReadFile(statusPath); err == nil {
		var old api.JobStatus
		if json.Unmarshal(data, &old) != nil || old.ID != r.Status.ID {
			if err := os.Remove(statusPath); err != nil {
				return err
			}
		}
	}
	st := r.Status
	st.Tables = nil
	for _, name := range api.Tables {
		rec := r.tables[name]
		if rec == nil {
			continue
		}
		st.Tables = append(st.Tables, name)
		if err := writeTableFile(dir, name+".arrows", rec); err != nil {
			return err
		}
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := replaceFile(dir, filepath.Base(statusPath), data); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(dir, pendingName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// writeTableFile writes rec into dir as an Arrow IPC stream called name, through a temporary file
// renamed into place.
func writeTableFile(dir, name string, rec arrow.RecordBatch) error {
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	w := ipc.NewWriter(f, ipc.WithSchema(rec.Schema()))
	err = w.Write(rec)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
