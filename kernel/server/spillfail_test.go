//go:build unix

package server

import (
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// A job whose results cannot be written fails with an error a client can show: what failed and the
// system's reason, on a full disk what to do, and that it must be submitted again, but none of the
// spill directory's paths, which the error of the writing names (the job's directory, its table files,
// the staging folder). The log has the full error, paths included. Nothing of the tables stays, and the
// manifest holds the same path-free error. Three ways to fail: the table write refused (injected where
// a batch is written, as a full disk fails it), the staging folder gone from under the writer (a real
// error of the tables package and os), and the manifest that would say done refused after the tables.
func TestSpillFailureNamesNoPath(t *testing.T) {
	type mode int
	const (
		tableWrite mode = iota
		stagingGone
		manifestAfter
	)
	spill := t.TempDir()
	var (
		mu       sync.Mutex
		now      mode
		fail     syscall.Errno // the table write's error (tableWrite)
		manifest error         // what manifest writes return once armed; nil writes them
	)
	hooks := testHooks{
		spillBatch: func(id, table string) error {
			mu.Lock()
			defer mu.Unlock()
			switch now {
			case tableWrite: // as (*os.File).Write returns it, naming the file
				return &fs.PathError{Op: "write", Path: filepath.Join(spill, id, "result."+table+".parquet"), Err: fail}
			case stagingGone:
				// The set's staging folder beside result.parquet goes, with the file being written in it.
				left, _ := filepath.Glob(filepath.Join(spill, id, ".result.parquet.*.tmp"))
				for _, p := range left {
					os.RemoveAll(p)
				}
			case manifestAfter:
				manifest = syscall.ENOSPC // the tables write; the manifest that says done does not
			}
			return nil
		},
		manifestWrite: func(path string) error {
			mu.Lock()
			defer mu.Unlock()
			if manifest == nil {
				return nil
			}
			return &fs.PathError{Op: "write", Path: path, Err: manifest}
		},
	}
	logs := &syncBuffer{}
	ts := startServer(t, Config{SpillDir: spill, Logger: slog.New(slog.NewTextHandler(logs, nil))}, hooks)
	req := api.Request{Inputs: []api.Input{api.TextInput("no room for the results"), {Tokens: []int32{3, 1, 4}}},
		Options: api.Options{TopK: 3, Lens: []int{1}}}

	for _, tt := range []struct {
		name   string
		mode   mode
		fail   syscall.Errno // the table write's error (tableWrite)
		want   string        // in the job's error
		reason string        // in the log's full error
	}{
		{"table write, no space", tableWrite, syscall.ENOSPC, "writing the results: the server's result disk is full", syscall.ENOSPC.Error()},
		{"table write, over quota", tableWrite, syscall.EDQUOT, "writing the results: the server's result disk is full", syscall.EDQUOT.Error()},
		{"table write, I/O error", tableWrite, syscall.EIO, "writing the results: write: " + syscall.EIO.Error() + " (the server's log has the full error)", syscall.EIO.Error()},
		{"staging folder gone", stagingGone, 0, "writing the results: rename: " + syscall.ENOENT.Error(), syscall.ENOENT.Error()},
		{"manifest after the tables, no space", manifestAfter, 0, "writing the results: the server's result disk is full", syscall.ENOSPC.Error()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			now, fail, manifest = tt.mode, tt.fail, nil
			mu.Unlock()
			before := len(logs.String())
			id := ts.submit(t, req).ID
			st := ts.waitState(t, id, api.StateFailed)
			ts.spills.Wait() // the failed job's manifest is written after its state says failed
			if !strings.Contains(st.Error, tt.want) || !strings.HasSuffix(st.Error, "submit it again") {
				t.Errorf("job error %q: -want %q and submit it again", st.Error, tt.want)
			}
			_, raw := ts.do(t, "GET", api.JobPath(id), "")
			for _, leak := range []string{spill, ts.jobDir(id), ".parquet", ".tmp", manifestName} {
				if strings.Contains(string(raw), leak) {
					t.Errorf("the job's status names the server's files (%s): %s", leak, raw)
				}
			}
			log := logs.String()[before:]
			if !strings.Contains(log, "spill failed") || !strings.Contains(log, tt.reason) || !strings.Contains(log, ts.jobDir(id)) {
				t.Errorf("the log lacks the full error (the reason and the job's directory):\n%s", log)
			}
			entries, err := os.ReadDir(ts.jobDir(id))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if e.Name() != manifestName {
					t.Errorf("the failed job left %s in its directory", e.Name())
				}
			}
			if tt.mode == manifestAfter {
				return // the full disk refused the failed job's manifest too; the log says so
			}
			if m, err := readManifest(ts.jobDir(id)); err != nil || m.Status.State != api.StateFailed || m.Status.Error != st.Error {
				t.Errorf("manifest: %s %q (%v), -want failed %q", m.Status.State, m.Status.Error, err, st.Error)
			}
		})
	}
}
