package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/internal/staging"
	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay"
)

// A client that drops its progress stream mid-job loses nothing: the job finishes and its result is
// fetched later by id.
func TestDisconnectThenFetch(t *testing.T) {
	atLayer2, resume := make(chan struct{}), make(chan struct{})
	hooks := testHooks{afterLayer: func(p replay.Progress) {
		if p.Layer == 2 {
			close(atLayer2)
			<-resume
		}
	}}
	ts := startServer(t, Config{}, hooks)
	req := api.Request{Inputs: []api.Input{api.TextInput("a client that walks away")}, Options: api.Options{TopK: 2}}
	id := ts.submit(t, req).ID

	ctx, hangUp := context.WithCancel(context.Background())
	hr, _ := http.NewRequestWithContext(ctx, "GET", ts.url+api.ProgressPath(id), nil)
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != api.ContentTypeNDJSON {
		t.Errorf("progress content type %q", ct)
	}
	<-atLayer2
	sc := bufio.NewScanner(resp.Body)
	var p api.Progress
	for p.Layer < 2 && sc.Scan() {
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatalf("progress line %q: %v", sc.Text(), err)
		}
	}
	if p.State != api.StateRunning || p.Layer != 2 || p.Layers != 8 || p.Tokens == 0 || p.BytesRead == 0 {
		t.Fatalf("progress at layer 2: %+v", p)
	}
	hangUp()
	resp.Body.Close()
	close(resume)

	st := ts.waitState(t, id, api.StateDone)
	if st.Error != "" || len(st.Fetched) != 0 {
		t.Fatalf("after the client left: %+v", st)
	}
	want := solo(t, ts.request(t, req), 0, false)
	sameTable(t, id, ts.table(t, id, "tokens"), want.Tokens)
	if st := ts.status(t, id); len(st.Fetched) != 1 || st.Expires == nil {
		t.Errorf("after the fetch: fetched %v, expires %v", st.Fetched, st.Expires)
	}
}

// A finished result survives the server: the next server on the same spill directory serves it, and
// reports the jobs the last one left unfinished as failed.
func TestRestartFindsSpilledResults(t *testing.T) {
	spill := t.TempDir()
	ts := startServerNoCleanup(t, Config{SpillDir: spill}, testHooks{})
	req := api.Request{Inputs: []api.Input{api.TextInput("kept across a restart"), {Tokens: []int32{3, 1, 4, 1, 5}}},
		Options: api.Options{TopK: 4, Lens: []int{3}}}
	id := ts.waitState(t, ts.submit(t, req).ID, api.StateDone).ID
	want := solo(t, ts.request(t, req), 0, false)
	if err := ts.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	// A job the dead server had running: its manifest says so, and no table was written.
	crashed := manifest{Version: manifestVersion, PID: 4242, Status: api.JobStatus{ID: "00000000000000aa",
		State: api.StateRunning, Created: time.Now(), Sequences: 1, Tokens: 3, Precision: "bf16"}}
	if err := ts.writeManifest(crashed.Status.ID, crashed); err != nil { // the stopped server, as the dead one would have
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(spill, "00000000000000bb"), 0o700) // died before its first manifest
	// killed while it wrote its tables: a staging directory with a table and the owner file, its lock gone
	// with the process (a staging directory of a live writer would hold it)
	staged := filepath.Join(ts.jobDir(crashed.Status.ID), ".result.parquet.123456.tmp")
	for _, name := range []string{staging.OwnerFile, "tokens.parquet"} {
		if err := os.MkdirAll(staged, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(staged, name), []byte("written so far"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	ts2 := startServer(t, Config{SpillDir: spill}, testHooks{})
	st := ts2.status(t, id)
	if st.State != api.StateDone || st.Wave == nil || st.Wave.ID != 1 {
		t.Fatalf("after restart: %+v", st)
	}
	for _, name := range []string{"tokens", "lens"} {
		sameTable(t, id, ts2.table(t, id, name), want.Table(name))
	}
	st = ts2.status(t, crashed.Status.ID)
	if st.State != api.StateFailed || !strings.Contains(st.Error, "pid 4242") || !strings.Contains(st.Error, "submit it again") {
		t.Errorf("crashed job after restart: %s %q", st.State, st.Error)
	}
	if code, _ := ts2.do(t, "GET", api.TablePath(crashed.Status.ID, "tokens"), ""); code != http.StatusConflict {
		t.Errorf("fetching the crashed job: %d, want 409", code)
	}
	if _, err := os.Stat(filepath.Join(spill, "00000000000000bb")); !os.IsNotExist(err) {
		t.Errorf("a job directory without manifest was left: %v", err)
	}
	m, err := readManifest(filepath.Join(spill, crashed.Status.ID))
	if err != nil || m.Status.State != api.StateFailed {
		t.Errorf("the crashed job's manifest was not rewritten: %v %v", m.Status.State, err)
	}
	if _, err := os.Stat(staged); !os.IsNotExist(err) {
		t.Errorf("the tables a killed server was writing were left until the job expires: %v", err)
	}
}

// Two servers may not share a spill directory.
func TestSpillLocked(t *testing.T) {
	spill := t.TempDir()
	startServer(t, Config{SpillDir: spill}, testHooks{})
	_, err := New(context.Background(), Config{ModelDir: modelDir, SpillDir: spill})
	if err == nil || !strings.Contains(err.Error(), "in use by another server") {
		t.Fatalf("second server on one spill directory: %v", err)
	}
}

// Fetched results go after the keep period; results never fetched stay.
func TestKeepAfterFetch(t *testing.T) {
	ts := startServer(t, Config{Keep: 300 * time.Millisecond}, testHooks{})
	fetched := ts.waitState(t, ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{1, 2}}}}).ID, api.StateDone).ID
	unfetched := ts.waitState(t, ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{3, 4}}}}).ID, api.StateDone).ID
	ts.table(t, fetched, "tokens")
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _ := ts.do(t, "GET", api.JobPath(fetched), "")
		if code == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fetched job still there after 10s (%d)", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The janitor forgets the job, then deletes its files: the directory may outlive the 404 briefly.
	for {
		_, err := os.Stat(ts.jobDir(fetched))
		if os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("expired job's directory still there after 10s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := ts.status(t, unfetched); st.State != api.StateDone || st.Expires != nil {
		t.Errorf("unfetched job: %s, expires %v", st.State, st.Expires)
	}
}

// SIGTERM's path: the wave in flight finishes and is spilled, queued jobs fail with a clear message.
func TestShutdownFinishesTheWave(t *testing.T) {
	spill := t.TempDir()
	inWave, resume := make(chan struct{}), make(chan struct{})
	hooks := testHooks{afterLayer: func(p replay.Progress) {
		if p.Layer == 1 {
			select {
			case <-inWave:
			default:
				close(inWave)
				<-resume
			}
		}
	}}
	ts := startServerNoCleanup(t, Config{SpillDir: spill}, hooks)
	running := ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{1, 2, 3}}}}).ID
	<-inWave
	queued := ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{4, 5, 6}}}}).ID
	done := make(chan error)
	go func() { done <- ts.Shutdown(context.Background()) }()
	// once the shutdown has begun (a request posted before the goroutine runs would rightly be accepted:
	// under load that made this test fail now and then)
	for closing := false; !closing; {
		ts.mu.Lock()
		closing = ts.closing
		ts.mu.Unlock()
		if !closing {
			time.Sleep(time.Millisecond)
		}
	}
	for { // refused: 503 while the listener is still open, then no connection at all
		resp, err := http.Post(ts.url+api.PathJobs, api.ContentTypeJSON, strings.NewReader(`{"inputs": [{"tokens": [1]}]}`))
		if err != nil {
			break
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusAccepted {
			t.Fatal("a job was accepted during shutdown")
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			break
		}
	}
	close(resume)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ts2 := startServer(t, Config{SpillDir: spill}, testHooks{})
	if st := ts2.status(t, running); st.State != api.StateDone {
		t.Errorf("the job in flight at shutdown: %s %q", st.State, st.Error)
	}
	if st := ts2.status(t, queued); st.State != api.StateFailed || !strings.Contains(st.Error, "shut down before this job's wave started") {
		t.Errorf("the job queued at shutdown: %s %q", st.State, st.Error)
	}
}

// Shutdown's time bounds the writing of results too: once it is up (here ctx, done from the start), a
// job whose tables are being written stops at the next record batch, fails with a message that says so,
// and leaves no table and no staging folder; the next server on the spill directory reports it failed.
func TestShutdownStopsSpill(t *testing.T) {
	spill := t.TempDir()
	inSpill, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hooks := testHooks{spillBatch: func(string, string) error {
		once.Do(func() { close(inSpill); <-release })
		return nil
	}}
	ts := startServerNoCleanup(t, Config{SpillDir: spill}, hooks)
	id := ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{3, 1, 4, 1, 5}}}, Options: api.Options{TopK: 3, Lens: []int{0, 7}}}).ID
	<-inSpill
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error)
	go func() { done <- ts.Shutdown(ctx) }()
	<-ts.spillCtx.Done() // stopped while the first batch was being built
	close(release)
	<-done // ctx's error: the HTTP server's graceful shutdown was cut short too

	m, err := readManifest(ts.jobDir(id))
	if err != nil || m.Status.State != api.StateFailed || m.Status.Error != errSpillShutdown.Error() {
		t.Errorf("manifest after the shutdown: %s %q (%v), -want failed %q", m.Status.State, m.Status.Error, err, errSpillShutdown)
	}
	entries, err := os.ReadDir(ts.jobDir(id))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != manifestName {
			t.Errorf("the stopped job left %s in its directory", e.Name())
		}
	}
	ts2 := startServer(t, Config{SpillDir: spill}, testHooks{})
	if st := ts2.status(t, id); st.State != api.StateFailed || st.Error != errSpillShutdown.Error() {
		t.Errorf("the stopped job after a restart: %s %q", st.State, st.Error)
	}
}
