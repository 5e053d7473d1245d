//go:build unix

package kernel

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/kernel/server"
)

// standIn is a stand-in for the background engine: a live process (sleep) that a state file names, an
// address that answers as told, and optionally the engine's lock on its spill directory.
type standIn struct {
	pid    int
	reaped chan struct{} // closed once the process has exited
}

// silentListener accepts connections on a unix socket and never answers, like an engine that is
// paused (SIGSTOP) or too busy to answer: the kernel accepts for it.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(shortTempDir(t), "s"))
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return "unix:" + ln.Addr().String()
}

// startSleeper runs a process that lives until it is signalled; the test ends it if nothing else does.
func startSleeper(t *testing.T) standIn {
	t.Helper()
	cmd := exec.Command("sleep", "120")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := standIn{pid: cmd.Process.Pid, reaped: make(chan struct{})}
	go func() { cmd.Wait(); close(s.reaped) }() // reaped at once, so alive() sees it go
	t.Cleanup(func() { cmd.Process.Kill(); <-s.reaped })
	return s
}

// holdSpillLock takes the lock the engine holds on its spill directory in dir, for the test's life.
func holdSpillLock(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, spillName), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(spillLock(dir), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
}

func writeState(t *testing.T, dir string, st api.State) {
	t.Helper()
	data, _ := json.Marshal(st)
	if err := os.WriteFile(filepath.Join(dir, stateName), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A background engine that misses one health check (paused, or busy) is kept: Connect says so and what
// to do, leaves its state file and log alone and starts no second engine; Shutdown still stops it.
func TestConnectKeepsEngineThatDoesNotAnswer(t *testing.T) {
	t.Setenv(EnvCache, t.TempDir())
	script := filepath.Join(t.TempDir(), "potato") // a start would leave its mark in the log
	os.WriteFile(script, []byte("#!/bin/sh\necho a second engine started\nexit 3\n"), 0o755)
	t.Setenv(EnvBin, script)
	defer func(d time.Duration) { healthTimeout = d }(healthTimeout)
	healthTimeout = 300 * time.Millisecond

	dir, err := stateDir()
	if err != nil {
		t.Fatal(err)
	}
	engine := startSleeper(t)
	holdSpillLock(t, dir)
	writeState(t, dir, api.State{Addr: silentListener(t), PID: engine.pid})
	state, _ := os.ReadFile(filepath.Join(dir, stateName))
	const logText = "the running engine's own log\n"
	os.WriteFile(filepath.Join(dir, logName), []byte(logText), 0o600)

	_, err = Connect()
	for _, want := range []string{"the engine (pid " + strconv.Itoa(engine.pid) + ") did not answer within 300ms",
		"it may be busy: retry, or kernel.Shutdown() to stop it", filepath.Join(dir, logName)} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Connect to an engine that does not answer: %v\nwant …%s…", err, want)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(dir, stateName)); !bytes.Equal(got, state) {
		t.Errorf("state file after Connect: %q, want it kept: %q", got, state)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, logName)); string(got) != logText {
		t.Errorf("log after Connect: %q, want it untouched", got)
	}

	if err := Shutdown(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-engine.reaped:
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown returned, and the engine that did not answer still runs")
	}
	if _, err := os.Stat(filepath.Join(dir, stateName)); !os.IsNotExist(err) {
		t.Errorf("state file after Shutdown: %v", err)
	}
}

// probe calls a state file stale only when no engine of it can be running; Shutdown signals nothing
// then, and Connect removes the state file.
func TestProbeStaleState(t *testing.T) {
	defer func(d time.Duration) { healthTimeout = d }(healthTimeout)
	healthTimeout = 300 * time.Millisecond
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.Health{Status: "ok", PID: 1}) // a server of another pid
	}))
	defer other.Close()
	page := httptest.NewServer(http.NotFoundHandler()) // a web server, not an engine
	defer page.Close()

	for _, tt := range []struct {
		name   string
		addr   func(t *testing.T) string
		pid    func(t *testing.T) int
		locked bool
		want   engineCheck
	}{
		{"silent, alive, holds the spill directory", silentListener, sleeperPID, true, engineBusy},
		{"silent, its pid exited", silentListener, func(*testing.T) int { return dead.Process.Pid }, true, engineGone},
		{"silent, pid alive but no spill lock (a reused pid)", silentListener, sleeperPID, false, engineGone},
		{"nothing listens", func(t *testing.T) string { return "unix:" + filepath.Join(shortTempDir(t), "none") }, sleeperPID, false, engineGone},
		{"another pid answers", func(*testing.T) string { return other.URL }, sleeperPID, true, engineGone},
		{"a web server answers", func(*testing.T) string { return page.URL }, sleeperPID, true, engineGone},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvCache, t.TempDir())
			dir, _ := stateDir()
			if tt.locked {
				holdSpillLock(t, dir)
			}
			st := api.State{Addr: tt.addr(t), PID: tt.pid(t)}
			if c, _, got := probe(dir, st, options{}); got != tt.want || c != nil {
				t.Fatalf("probe: %d (client %v), want %d", got, c, tt.want)
			}
			if tt.want != engineGone {
				return
			}
			writeState(t, dir, st)
			if err := Shutdown(); err != nil {
				t.Fatal(err)
			}
			if st.PID != dead.Process.Pid && !alive(st.PID) {
				t.Errorf("Shutdown of a stale state file signalled pid %d", st.PID)
			}
			if _, err := os.Stat(filepath.Join(dir, stateName)); !os.IsNotExist(err) {
				t.Errorf("stale state file after Shutdown: %v", err)
			}
		})
	}
}

func sleeperPID(t *testing.T) int { return startSleeper(t).pid }

// A stream must end with its end-of-stream marker: one cut short between messages is an error, not a
// table with fewer rows.
func TestReadStreamNeedsEndMarker(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	b.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2, 3}, nil)
	rec := b.NewRecordBatch()
	b.Release()
	defer rec.Release()
	stream := func(batches int) []byte {
		var buf bytes.Buffer
		w := ipc.NewWriter(&buf, ipc.WithSchema(schema))
		for range batches {
			if err := w.Write(rec); err != nil {
				t.Fatal(err)
			}
		}
		w.Close()
		return buf.Bytes()
	}
	empty, two := stream(0), stream(2)
	schemaOnly := empty[:len(empty)-8]
	oneBatch := stream(1)
	oneBatch = oneBatch[:len(oneBatch)-8]
	for _, tt := range []struct {
		name string
		data []byte
		rows int64 // -1: an error
	}{
		{"two batches", two, 6},
		{"no batches", empty, 0},
		{"schema only, no marker", schemaOnly, -1},
		{"one batch, no marker", oneBatch, -1},
		{"half the marker", two[:len(two)-4], -1},
		{"nothing", nil, -1},
	} {
		for _, rd := range []struct {
			name string
			wrap func([]byte) io.Reader
		}{
			{"whole reads", func(d []byte) io.Reader { return bytes.NewReader(d) }},
			{"byte by byte", func(d []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(d)) }},
			{"last bytes with io.EOF", func(d []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(d)) }},
		} {
			t.Run(tt.name+"/"+rd.name, func(t *testing.T) {
				got, err := readStream(rd.wrap(tt.data))
				switch {
				case tt.rows < 0 && err == nil:
					got.Release()
					t.Fatalf("read %d rows, want an error", got.NumRows())
				case tt.rows >= 0 && err != nil:
					t.Fatal(err)
				case err == nil:
					defer got.Release()
					if got.NumRows() != tt.rows {
						t.Fatalf("%d rows, want %d", got.NumRows(), tt.rows)
					}
				}
			})
		}
	}
}

// A cache entry cut short (a tokens stream of its schema alone), or one whose rows disagree with its
// status, is replayed again and overwritten, not returned as an empty result.
func TestReplayCachedDamagedEntry(t *testing.T) {
	t.Setenv(EnvCache, t.TempDir())
	c, err := Connect(WithAddr(startServer(t, "127.0.0.1:0", server.Config{})))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	first, err := c.ReplayCached(ctx, Example("greeting"), TopK(2))
	if err != nil {
		t.Fatal(err)
	}
	wantRows := first.Tokens().NumRows()
	var head bytes.Buffer // the stream of no batches: its schema message, then the marker
	w := ipc.NewWriter(&head, ipc.WithSchema(first.Tokens().Schema()))
	w.Close()
	first.Release()
	dir, _ := stateDir()
	entries, _ := filepath.Glob(filepath.Join(dir, resultsDir, "*"))
	if len(entries) != 1 || wantRows == 0 {
		t.Fatalf("%d cache entries, %d rows", len(entries), wantRows)
	}
	tokens, status := filepath.Join(entries[0], "tokens.arrows"), filepath.Join(entries[0], "status.json")
	for _, tt := range []struct {
		name   string
		damage func(t *testing.T)
	}{
		{"tokens stream cut after its schema", func(t *testing.T) {
			data, _ := os.ReadFile(tokens)
			schema := head.Bytes()[:head.Len()-8]
			if !bytes.HasPrefix(data, schema) {
				t.Fatal("the entry does not start with the schema message")
			}
			os.WriteFile(tokens, schema, 0o600)
		}},
		{"status of more tokens", func(t *testing.T) {
			data, _ := os.ReadFile(status)
			var st api.JobStatus
			json.Unmarshal(data, &st)
			st.Tokens++
			data, _ = json.Marshal(st)
			os.WriteFile(status, data, 0o600)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.damage(t)
			for i, fromCache := range []bool{false, true} { // replayed, then the overwritten entry read
				r, err := c.ReplayCached(ctx, Example("greeting"), TopK(2))
				if err != nil {
					t.Fatal(err)
				}
				if r.FromCache != fromCache || r.Tokens().NumRows() != wantRows || int64(r.Status.Tokens) != wantRows {
					t.Errorf("call %d: from cache %v with %d rows (status: %d tokens), want from cache %v with %d",
						i, r.FromCache, r.Tokens().NumRows(), r.Status.Tokens, fromCache, wantRows)
				}
				r.Release()
			}
		})
	}
}

// An engine that stops mid-wait: the error names the job, says what to do and where the log is, and
// the progress shown last is the last the engine sent, not an empty one.
func TestWaitEngineStops(t *testing.T) {
	const id = "j1"
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case api.PathJobs:
			w.WriteHeader(http.StatusAccepted)
			json.NewEncoder(w).Encode(api.JobStatus{ID: id, State: api.StateQueued})
		case api.ProgressPath(id):
			for layer := range 4 {
				json.NewEncoder(w).Encode(api.Progress{ID: id, State: api.StateRunning, Wave: 1, Layer: layer, Layers: 8})
			}
			w.(http.Flusher).Flush()
			srv.Listener.Close()        // the engine is gone: later connections are refused
			panic(http.ErrAbortHandler) // and this one breaks
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	var progress bytes.Buffer
	c, err := newClient(srv.URL, "", &progress)
	if err != nil {
		t.Fatal(err)
	}
	c.logPath = "/cache/kernel/serve.log"
	_, err = c.Replay(context.Background(), Tokens(1, 2))
	for _, want := range []string{"kernel: job j1: the engine stopped answering (", "connection refused",
		"): Connect again, and see its log at /cache/kernel/serve.log"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error: %v\nwant …%s…", err, want)
		}
	}
	lines := strings.Split(strings.TrimSpace(progress.String()), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, "3 of 8 layers done") || !strings.Contains(last, "failed: kernel: job j1") {
		t.Errorf("last progress line: %q, want the last report (3 of 8 layers) and why it failed", last)
	}
}

// An engine that stops just after the progress stream said the job ended (a server shut down once its
// wave was over): Wait says how the job ended, not only that the engine is gone: a failed job with the
// engine's reason, a done one that its results stay for Fetch after a new Connect.
func TestWaitEngineStopsAfterTheEnd(t *testing.T) {
	const id = "j1"
	for _, tt := range []struct {
		state api.JobState
		msg   string
		want  []string
	}{
		{api.StateFailed, "the server shut down before this job's wave started; submit it again", []string{
			"kernel: job j1 failed: the server shut down before this job's wave started; submit it again; the engine has stopped answering since (",
			"connection refused", ") (its log: /cache/kernel/serve.log)"}},
		{api.StateCancelled, "cancelled by a client", []string{
			"kernel: job j1 was cancelled: cancelled by a client; the engine has stopped answering since ("}},
		{api.StateDone, "", []string{
			"kernel: job j1 is done, but the engine stopped answering before its results were fetched (",
			`): they stay in its spill directory: Connect again, then Fetch(ctx, "j1") (its log: /cache/kernel/serve.log)`}},
	} {
		t.Run(string(tt.state), func(t *testing.T) {
			var srv *httptest.Server
			srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != api.ProgressPath(id) {
					http.NotFound(w, r)
					return
				}
				w.Header().Set("Connection", "close") // nor may the status reuse this connection
				json.NewEncoder(w).Encode(api.Progress{ID: id, State: api.StateRunning, Wave: 1, Layer: 3, Layers: 8})
				json.NewEncoder(w).Encode(api.Progress{ID: id, State: tt.state, Wave: 1, Layer: 8, Layers: 8, Error: tt.msg})
				w.(http.Flusher).Flush()
				srv.Listener.Close() // the engine is gone once the stream ends: Wait's status is refused
			}))
			defer srv.Close()
			c, err := newClient(srv.URL, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			c.logPath = "/cache/kernel/serve.log"
			_, err = c.Wait(context.Background(), id)
			for _, want := range tt.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error: %v\nwant …%s…", err, want)
				}
			}
		})
	}
}

// Connect blames the token only when the answer says so; a web server is named as no engine with a
// short part of its page; an address of another scheme is refused by name.
func TestConnectNotAnEngine(t *testing.T) {
	page := strings.Repeat("<html><body>Welcome to a web site</body></html>\n", 2000)
	for _, tt := range []struct {
		name    string
		status  int
		want    string
		notWant string
	}{
		{"401", http.StatusUnauthorized, "refused us (check POTATO_TOKEN)", "not a potato engine"},
		{"403", http.StatusForbidden, "refused us (check POTATO_TOKEN)", "not a potato engine"},
		{"404", http.StatusNotFound, "is not a potato engine (HTTP 404 Not Found: <html><body>Welcome", "POTATO_TOKEN"},
		{"500", http.StatusInternalServerError, "is not a potato engine (HTTP 500 Internal Server Error", "POTATO_TOKEN"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				w.Write([]byte(page))
			}))
			defer srv.Close()
			_, err := Connect(WithAddr(srv.URL))
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), tt.notWant) {
				t.Fatalf("(-want +got):\n-…%s… (not %s)\n+%.300v", tt.want, tt.notWant, err)
			}
			if len(err.Error()) > 600 {
				t.Errorf("error of %d bytes: the page is not cut", len(err.Error()))
			}
		})
	}
	for _, addr := range []string{"ftp://x", "tcp://127.0.0.1:1"} {
		_, err := Connect(WithAddr(addr))
		if err == nil || !strings.Contains(err.Error(), `"`+addr+`"`) || !strings.Contains(err.Error(), "http, https or unix") {
			t.Errorf("Connect(%s): %v", addr, err)
		}
	}
}

// Shutdown takes the start lock as Connect does: while a Connect holds it (starting an engine), Shutdown
// waits rather than race it.
func TestShutdownWaitsForStartLock(t *testing.T) {
	t.Setenv(EnvCache, t.TempDir())
	dir, err := stateDir()
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := lockFile(filepath.Join(dir, lockName))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Shutdown() }()
	select {
	case err := <-done:
		unlock()
		t.Fatalf("Shutdown returned (%v) while the start lock was held", err)
	case <-time.After(200 * time.Millisecond):
	}
	unlock()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Shutdown with no engine: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return once the start lock was free")
	}
}
