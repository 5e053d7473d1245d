//go:build unix

package server

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// syncBuffer is a log sink that the server's goroutines and the test may use at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A submission whose manifest cannot be written is refused, 507 when the disk is full or over quota and
// 500 otherwise, with a message that names the system's reason but none of the server's paths (the log
// has the full error), and leaves no job directory behind; once the disk has room again the next
// submission is queued. The failure is injected where the manifest's temporary file is written, after
// its directory was made, as a full disk fails (a tmpfs to fill is not there in CI).
func TestSubmitDiskFull(t *testing.T) {
	var (
		mu   sync.Mutex
		fail error // what the next manifest write returns; nil writes it
	)
	hooks := testHooks{manifestWrite: func(path string) error {
		mu.Lock()
		defer mu.Unlock()
		if fail == nil {
			return nil
		}
		return &fs.PathError{Op: "write", Path: path, Err: fail} // as (*os.File).Write returns it
	}}
	spill := t.TempDir()
	logs := &syncBuffer{}
	ts := startServer(t, Config{SpillDir: spill, Logger: slog.New(slog.NewTextHandler(logs, nil))}, hooks)
	body := jsonBody(api.Request{Inputs: []api.Input{api.TextInput("no room for this one")}})

	for _, tt := range []struct {
		name   string
		errno  syscall.Errno
		status int
		msg    string
	}{
		{"no space", syscall.ENOSPC, http.StatusInsufficientStorage, "the server's result disk is full"},
		{"over quota", syscall.EDQUOT, http.StatusInsufficientStorage, "the server's result disk is full"},
		{"I/O error", syscall.EIO, http.StatusInternalServerError, "writing its manifest: write: " + syscall.EIO.Error()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			fail = tt.errno
			mu.Unlock()
			code, data := ts.do(t, "POST", api.PathJobs, body)
			var e api.Error
			if err := json.Unmarshal(data, &e); err != nil {
				t.Fatalf("%d %s: %v", code, data, err)
			}
			if code != tt.status || !strings.Contains(e.Error, tt.msg) {
				t.Errorf("answer %d %q, want %d with %q", code, e.Error, tt.status, tt.msg)
			}
			if strings.Contains(string(data), spill) || strings.Contains(string(data), manifestName) {
				t.Errorf("the answer names the server's files: %s", data)
			}
			if !strings.Contains(logs.String(), tt.errno.Error()) || !strings.Contains(logs.String(), spill) {
				t.Errorf("the log lacks the full error:\n%s", logs.String())
			}
			entries, err := os.ReadDir(spill)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if idPattern.MatchString(e.Name()) {
					t.Errorf("the refused job left %s in the spill directory", e.Name())
				}
			}
			if code, data := ts.do(t, "GET", api.PathJobs, ""); code != http.StatusOK || string(bytes.TrimSpace(data)) != "[]" {
				t.Errorf("jobs after the refusal: %d %s, want none", code, data)
			}
		})
	}

	mu.Lock()
	fail = nil
	mu.Unlock()
	id := ts.submit(t, api.Request{Inputs: []api.Input{api.TextInput("room again")}}).ID
	ts.waitState(t, id, api.StateDone)
	if _, err := os.Stat(filepath.Join(spill, id, manifestName)); err != nil {
		t.Errorf("the job queued once the disk had room: %v", err)
	}
}

// A table the server cannot read back answers 500 like a manifest it cannot write: the reason without
// the server's paths.
func TestTableUnreadable(t *testing.T) {
	spill := t.TempDir()
	ts := startServer(t, Config{SpillDir: spill}, testHooks{})
	id := ts.submit(t, api.Request{Inputs: []api.Input{api.TextInput("damaged on disk")}}).ID
	ts.waitState(t, id, api.StateDone)
	if err := os.WriteFile(ts.tablePath(id, "tokens"), []byte("not Parquet"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, data := ts.do(t, "GET", api.TablePath(id, "tokens"), "")
	if code != http.StatusInternalServerError || !strings.Contains(string(data), "reading table tokens of job "+id) {
		t.Errorf("answer %d %s, want 500 naming the table", code, data)
	}
	if strings.Contains(string(data), spill) || strings.Contains(string(data), ".parquet") {
		t.Errorf("the answer names the server's files: %s", data)
	}
}
