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
// (readable by pyarrow.ipc.open_stream), or, while its job runs, pending.json alone. Nothing expires it;
// delete the directory to start over.

// resultsDir is the results cache's directory.
const resultsDir = "results"

// pendingName is the file in an entry's directory that names the job submitted for it, written before
// ReplayCached waits, so that a call whose context ends mid-job leaves the job findable and the next call
// waits for it instead of replaying it twice. A stored entry replaces the whole directory, and with it
// this file. The format stays "potato-kernel-results-1": an entry with status.json reads as before, and a
// client that does not know pending.json takes a directory without status.json for a miss, as it did.
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
	if r, err := readCached(entry); err == nil {
		return r, nil
	}
	id, err := c.resumable(ctx, entry, req, info)
	if err != nil {
		return nil, err
	}
	if id == "" {
		st, err := c.submit(ctx, req)
		if err != nil {
			return nil, err
		}
		id = st.ID
		if err := writePending(entry, id); err != nil {
			c.warnCache(err) // the job runs all the same; only a repeated call after a timeout submits again
		}
	}
	if _, err := c.Wait(ctx, id); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w; ReplayCached with the same request waits for this job rather than submit it again", err)
		}
		return nil, err
	}
	r, err := c.Fetch(ctx, id)
	if err != nil {
		return nil, err
	}
	// Stored, the entry replaces its directory and the pending file with it; not stored, the pending
	// file stays, and the next call fetches the done job again (while the engine keeps it) instead of
	// replaying.
	if err := writeCached(entry, r); err != nil {
		c.warnCache(err)
	}
	return r, nil
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

// writePending records in entry's directory that job id was submitted for it.
func writePending(entry, id string) error {
	if err := os.MkdirAll(entry, 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(pending{Job: id})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(entry, pendingName), data, 0o600)
}

// cacheWarnings receives ReplayCached's one warning a client when a result could not be stored (a test
// reads it).
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

// writeCached stores r at dir: written into a temporary directory beside it, then renamed into place,
// so that a reader never sees half an entry.
func writeCached(dir string, r *Result) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	st := r.Status
	st.Tables = nil
	for _, name := range api.Tables {
		rec := r.tables[name]
		if rec == nil {
			continue
		}
		st.Tables = append(st.Tables, name)
		if err := writeTableFile(filepath.Join(tmp, name+".arrows"), rec); err != nil {
			return err
		}
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "status.json"), data, 0o600); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.Rename(tmp, dir)
}

// writeTableFile writes rec to path as an Arrow IPC stream.
func writeTableFile(path string, rec arrow.RecordBatch) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	w := ipc.NewWriter(f, ipc.WithSchema(rec.Schema()))
	if err := w.Write(rec); err != nil {
		w.Close()
		f.Close()
		return err
	}
	if err := w.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
