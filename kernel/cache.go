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
// (readable by pyarrow.ipc.open_stream). Nothing expires it; delete the directory to start over.

// resultsDir is the results cache's directory.
const resultsDir = "results"

// ReplayCached is Replay, except that a request equal to one made before, to an engine on the same model
// (config hash, engine version, backend, default precision and model directory, from Info), returns the
// result stored then, read from disk, with FromCache set: no second replay. Anything else replays and
// stores the result. A damaged entry is replayed again and overwritten. It fails as Replay does, and
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
	r, err := c.Replay(ctx, args...)
	if err != nil {
		return nil, err
	}
	if err := writeCached(entry, r); err != nil {
		// The result is good; only the cache failed, and the next call replays again: say so once, on
		// stderr (a notebook cell shows it), rather than let every call replay without a word.
		c.cacheWarned.Do(func() {
			fmt.Fprintf(cacheWarnings, "kernel: ReplayCached could not store a result (%v); results are not cached and each call replays\n", err)
		})
	}
	return r, nil
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
