package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/synth"
	"github.com/potato-k3/potato-k3/replay/tables"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// modelDir is the tiny synthetic model every test serves, written once per test binary.
var modelDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "server-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	modelDir = filepath.Join(dir, "tiny")
	if _, err := synth.Write(context.Background(), modelDir, synth.Options{Preset: "tiny", Seed: 1}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testServer is a Server answering on a loopback port, and a client of it.
type testServer struct {
	*Server
	url   string
	hc    *http.Client
	token string
}

// startServer starts a server on the tiny model with cfg's non-zero fields (a fresh spill directory when
// cfg has none, a silent log when it has no Logger) and hooks, and stops it at the end of the test.
func startServer(t *testing.T, cfg Config, hooks testHooks) *testServer {
	t.Helper()
	ts := startServerNoCleanup(t, cfg, hooks)
	t.Cleanup(func() { ts.Shutdown(context.Background()) })
	return ts
}

func startServerNoCleanup(t *testing.T, cfg Config, hooks testHooks) *testServer {
	t.Helper()
	cfg.ModelDir = modelDir
	if cfg.SpillDir == "" {
		cfg.SpillDir = t.TempDir()
	}
	if cfg.Gather == 0 {
		cfg.Gather = -1
	}
	if cfg.Logger == nil { // a test that reads the log gives its own
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		if testing.Verbose() {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
		}
	}
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.hooks = hooks
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	return &testServer{Server: s, url: "http://" + l.Addr().String(), hc: &http.Client{}, token: cfg.Token}
}

// do sends method path with a raw body and returns the status and body.
func (ts *testServer) do(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ts.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ts.token != "" {
		req.Header.Set("Authorization", "Bearer "+ts.token)
	}
	resp, err := ts.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

// submit posts req and returns the new job's status; any answer but 202 fails the test.
func (ts *testServer) submit(t *testing.T, req api.Request) api.JobStatus {
	t.Helper()
	body, _ := json.Marshal(req)
	code, data := ts.do(t, "POST", api.PathJobs, string(body))
	if code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", code, data)
	}
	var st api.JobStatus
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// status returns job id's status.
func (ts *testServer) status(t *testing.T, id string) api.JobStatus {
	t.Helper()
	code, data := ts.do(t, "GET", api.JobPath(id), "")
	if code != http.StatusOK {
		t.Fatalf("status %s: %d %s", id, code, data)
	}
	var st api.JobStatus
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// waitState polls job id until its state is want (or terminal and not want, which fails the test).
func (ts *testServer) waitState(t *testing.T, id string, want api.JobState) api.JobStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st := ts.status(t, id)
		if st.State == want {
			return st
		}
		if st.State.Terminal() {
			t.Fatalf("job %s: want %s, got %s (%s)", id, want, st.State, st.Error)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("job %s: not %s after 30s", id, want)
	return api.JobStatus{}
}

// table fetches one table of a done job.
func (ts *testServer) table(t *testing.T, id, name string) *tables.Table {
	t.Helper()
	resp, err := ts.hc.Get(ts.url + api.TablePath(id, name))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != api.ContentTypeArrow {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("table %s of %s: %d %s %s", name, id, resp.StatusCode, resp.Header.Get("Content-Type"), data)
	}
	tab, err := tables.ReadIPC(resp.Body, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tab.Release)
	if code, data := ts.do(t, "POST", api.ReceivedPath(id, name), ""); code != http.StatusNoContent { // as kernel.Client does
		t.Fatalf("confirming table %s of %s: %d %s", name, id, code, data)
	}
	return tab
}

// solo replays r alone on a fresh engine of the tiny model and builds its tables as the server does, the
// top-k ids named by the model's tokenizer itself (not the server's table of pieces).
func solo(t *testing.T, r replay.Request, prec ops.Precision, float16 bool) *tables.Set {
	t.Helper()
	o, err := OpenCPU(context.Background(), modelDir, prec, replay.EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	res, _, err := o.Engine.Run(context.Background(), []replay.Request{r})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	set, err := tables.Build(res[0], tables.Options{HiddenFloat16: float16, Metadata: map[string]string{
		tables.MetaConfigHash: o.Engine.ConfigSHA256, tables.MetaWeightsHash: o.Engine.WeightsSHA256, tables.MetaEngine: replay.Version,
		tables.MetaPrecision: prec.String(), tables.MetaBackend: o.Backend,
	}, Piece: tok.Piece})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Release)
	return set
}

// sameProvenance reports whether got's metadata is want's (a solo build's) plus the run's own keys, the
// result set (the job id) and the request hash.
func sameProvenance(got, want *tables.Table) bool {
	g, w := got.Schema.Metadata().ToMap(), want.Schema.Metadata().ToMap()
	delete(g, tables.MetaResultSet)
	delete(g, tables.MetaRequestHash)
	return maps.Equal(g, w)
}

// sameTable fails the test unless got holds the same schema (metadata included) and rows as want.
func sameTable(t *testing.T, job string, got, want *tables.Table) {
	t.Helper()
	if !got.Schema.Equal(want.Schema) || !sameProvenance(got, want) {
		t.Fatalf("job %s table %s: schema\n got  %v\n want %v", job, want.Name, got.Schema, want.Schema)
	}
	if md := got.Schema.Metadata().ToMap(); md[tables.MetaResultSet] != job || len(md[tables.MetaRequestHash]) != 64 {
		t.Fatalf("job %s table %s: result set %q, request hash %q", job, want.Name, md[tables.MetaResultSet], md[tables.MetaRequestHash])
	}
	g, w := got.ArrowTable(), want.ArrowTable()
	defer g.Release()
	defer w.Release()
	if !array.TableEqual(g, w) {
		for i := range int(w.NumCols()) {
			if !array.ChunkedEqual(g.Column(i).Data(), w.Column(i).Data()) {
				t.Errorf("job %s table %s: column %s differs from a solo replay", job, want.Name, w.Schema().Field(i).Name)
			}
		}
		t.Fatalf("job %s table %s: %d rows, want %d, not equal to a solo replay", job, want.Name, g.NumRows(), w.NumRows())
	}
}

// request builds the replay.Request the server makes of req (for solo), failing on a refusal.
func (ts *testServer) request(t *testing.T, req api.Request) replay.Request {
	t.Helper()
	r, _, err := ts.build(req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// jsonBody is v as JSON text.
func jsonBody(v any) string {
	var b bytes.Buffer
	json.NewEncoder(&b).Encode(v)
	return b.String()
}
