package kernel

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// serveProc is a `potato serve` process and an HTTP client of it.
type serveProc struct {
	cmd  *exec.Cmd
	base string // http://host:port, or http://potato over a unix socket
	hc   *http.Client
	log  *bytes.Buffer
}

// startServe runs the potato binary TestMain built as `potato serve` on the tiny model with spill
// directory spill, listening on listen ("127.0.0.1:0" or "unix:/path"), and waits until it answers.
func startServe(t *testing.T, spill, listen string) *serveProc {
	t.Helper()
	state := filepath.Join(t.TempDir(), "serve.json")
	p := &serveProc{log: &bytes.Buffer{}}
	p.cmd = exec.Command(os.Getenv(EnvBin), "serve", "--model", modelDir, "--spill", spill, "--listen", listen,
		"--state-file", state, "--gather", "0")
	p.cmd.Env = append(os.Environ(), EnvCache+"="+filepath.Join(t.TempDir(), "cache"))
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	var st api.State
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if data, err := os.ReadFile(state); err == nil && json.Unmarshal(data, &st) == nil && st.Addr != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("potato serve did not start in 60 s:\n%s", p.log)
		}
	}
	if st.Source != api.SourceRoot() { // the potato TestMain built, from this checkout
		t.Errorf("the state file names the checkout %q, want %q", st.Source, api.SourceRoot())
	}
	if path, ok := strings.CutPrefix(st.Addr, "unix:"); ok {
		p.base = "http://potato"
		p.hc = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}}
	} else {
		p.base, p.hc = st.Addr, &http.Client{}
	}
	return p
}

func (p *serveProc) do(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, p.base+path, strings.NewReader(body))
	resp, err := p.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v\nserver log:\n%s", method, path, err, p.log)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func (p *serveProc) submit(t *testing.T, req api.Request) string {
	t.Helper()
	data, _ := json.Marshal(req)
	code, body := p.do(t, "POST", api.PathJobs, string(data))
	var st api.JobStatus
	if code != http.StatusAccepted || json.Unmarshal(body, &st) != nil {
		t.Fatalf("submit: %d %s", code, body)
	}
	return st.ID
}

func (p *serveProc) status(t *testing.T, id string) api.JobStatus {
	t.Helper()
	code, body := p.do(t, "GET", api.JobPath(id), "")
	var st api.JobStatus
	if code != http.StatusOK || json.Unmarshal(body, &st) != nil {
		t.Fatalf("status %s: %d %s", id, code, body)
	}
	return st
}

func (p *serveProc) wait(t *testing.T, id string, want api.JobState) api.JobStatus {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		st := p.status(t, id)
		if st.State == want {
			return st
		}
		if st.State.Terminal() {
			t.Fatalf("job %s: %s (%s), want %s", id, st.State, st.Error, want)
		}
	}
	t.Fatalf("job %s: not %s after 60 s", id, want)
	return api.JobStatus{}
}

// table fetches a table of a done job as an Arrow table.
func (p *serveProc) table(t *testing.T, id, name string) *tables.Table {
	t.Helper()
	resp, err := p.hc.Get(p.base + api.TablePath(id, name))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("table %s of %s: %d %s", name, id, resp.StatusCode, body)
	}
	tab, err := tables.ReadIPC(bufio.NewReader(resp.Body), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tab.Release)
	return tab
}

// sameTables fails unless got and want hold the same schema (metadata included) and rows.
func sameTables(t *testing.T, what string, got, want *tables.Table) {
	t.Helper()
	g, w := got.ArrowTable(), want.ArrowTable()
	defer g.Release()
	defer w.Release()
	// the run's own keys (result set, request hash) are the server's; the rest is the solo build's
	gm, wm := got.Schema.Metadata().ToMap(), want.Schema.Metadata().ToMap()
	for _, k := range []string{tables.MetaResultSet, tables.MetaRequestHash} {
		if _, solo := wm[k]; !solo {
			delete(gm, k)
		}
	}
	if !got.Schema.Equal(want.Schema) || !maps.Equal(gm, wm) || !array.TableEqual(g, w) {
		t.Fatalf("%s: %d rows, want %d: not the same table", what, g.NumRows(), w.NumRows())
	}
}

// `kill -9` of potato serve during a wave, then a restart on the same spill directory: finished results
// come back from the spill exactly (fetched before the kill or not), the job whose wave was cut and the
// job queued behind it are reported failed with a message that says so, no half-written file is visible
// (every manifest parses, every table reads, no temporary file is left), and the new server replays.
func TestKillDuringWaveThenRestart(t *testing.T) {
	spill := t.TempDir()
	p := startServe(t, spill, "127.0.0.1:0")
	tk := tok(t)

	fetchedReq := api.Request{Inputs: []api.Input{api.TextInput("fetched before the crash")}, Options: api.Options{TopK: 3, Lens: []int{2}}}
	fetched := p.submit(t, fetchedReq)
	p.wait(t, fetched, api.StateDone)
	before := map[string]*tables.Table{"tokens": p.table(t, fetched, "tokens"), "lens": p.table(t, fetched, "lens")}
	unfetchedIDs := []int32{5, 6, 7, 8, 9, 10}
	unfetched := p.submit(t, api.Request{Inputs: []api.Input{{Tokens: unfetchedIDs}}, Options: api.Options{TopK: 2, Hidden: []int{4}}})
	p.wait(t, unfetched, api.StateDone)

	// A long job (one sequence of 3000 tokens: about 0.2 s a layer here) and one queued behind it.
	long := make([]int32, 3000)
	for i := range long {
		long[i] = int32((i * 7) % 3000)
	}
	running := p.submit(t, api.Request{Inputs: []api.Input{{Tokens: long}}})
	queued := p.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{1, 2, 3}}}})
	var at api.JobStatus
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		at = p.status(t, running)
		if at.State == api.StateRunning && at.Progress != nil && at.Progress.Layer >= 2 {
			break
		}
		if at.State.Terminal() || time.Now().After(deadline) {
			t.Fatalf("the long job never was mid-wave: %s, %+v", at.State, at.Progress)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.cmd.Wait()
	t.Logf("killed at layer %d of %d", at.Progress.Layer, at.Progress.Layers)

	// Nothing half-written: every manifest is whole JSON, every table file reads, no temporary file.
	var files []string
	filepath.Walk(spill, func(path string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(spill, path)
		files = append(files, rel)
		switch {
		case strings.Contains(fi.Name(), ".tmp"):
			t.Errorf("a temporary file is left: %s", rel)
		case fi.Name() == "job.json":
			data, _ := os.ReadFile(path)
			if !json.Valid(data) {
				t.Errorf("%s is not whole JSON", rel)
			}
		case strings.HasSuffix(fi.Name(), ".parquet"):
			if tab, err := tables.ReadParquet(path, nil); err != nil {
				t.Errorf("%s does not read: %v", rel, err)
			} else {
				tab.Release()
			}
		}
		return nil
	})
	for _, f := range files {
		if strings.HasPrefix(f, running+string(filepath.Separator)) && strings.HasSuffix(f, ".parquet") {
			t.Errorf("the job cut mid-wave has a table: %s", f)
		}
	}

	q := startServe(t, spill, "unix:"+filepath.Join(shortTempDir(t), "s.sock"))
	for name, tab := range before {
		sameTables(t, "the fetched job's "+name+" table after the restart", q.table(t, fetched, name), tab)
	}
	seq := replay.FromIDs(tk, unfetchedIDs)
	want := solo(t, replay.Options{TopK: 2, Hidden: []int{4}}, false, seq)
	for _, name := range []string{"tokens", "hidden"} {
		sameTables(t, "the unfetched job's "+name+" table after the restart", q.table(t, unfetched, name), want.Table(name))
	}
	for id, state := range map[string]string{running: "running", queued: "queued"} {
		st := q.status(t, id)
		if st.State != api.StateFailed || !strings.Contains(st.Error, fmt.Sprintf("stopped while this job was %s", state)) ||
			!strings.Contains(st.Error, "submit it again") {
			t.Errorf("the job that was %s at the kill: %s %q", state, st.State, st.Error)
		}
		if code, _ := q.do(t, "GET", api.TablePath(id, "tokens"), ""); code != http.StatusConflict {
			t.Errorf("fetching the job that was %s: %d, want 409", state, code)
		}
	}
	again := q.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{1, 2, 3}}}})
	q.wait(t, again, api.StateDone)
	q.cmd.Process.Signal(syscall.SIGTERM)
	if err := q.cmd.Wait(); err != nil {
		t.Errorf("the restarted server did not stop cleanly on SIGTERM: %v\n%s", err, q.log)
	}
}

// shortTempDir is a temporary directory with a short path (unix socket paths are limited to about 100
// bytes, and t.TempDir's can be longer).
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
