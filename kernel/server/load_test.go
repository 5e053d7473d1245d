package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// The service under load: 16 clients, each with its own connections, submit jobs drawn from a pool of
// requests for a bounded time, and stream progress, hang up on progress streams and on tables mid-way,
// cancel jobs while they wait or run, and delete finished ones. Every table fetched is checked against a
// solo replay of its request on a fresh engine (bit-identical Arrow tables, metadata included), and every
// job not cancelled must end done: no result is lost.
//
// The duration is 20 s, 3 s with -short, or POTATO_LOAD_SECONDS.
func TestLoad(t *testing.T) {
	const clients = 16
	duration := 20 * time.Second
	if testing.Short() {
		duration = 3 * time.Second
	}
	if s := os.Getenv("POTATO_LOAD_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("POTATO_LOAD_SECONDS=%q", s)
		}
		duration = time.Duration(n) * time.Second
	}
	var waves, shared atomic.Int64
	hooks := testHooks{beforeWave: func(ids []string) {
		waves.Add(1)
		if len(ids) > 1 {
			shared.Add(1)
		}
	}}
	ts := startServer(t, Config{Gather: 2 * time.Millisecond, Keep: 2 * time.Second,
		Limits: api.Limits{MaxWaveTokens: 160}}, hooks)

	pool := loadPool()
	want := make([]map[string]*tables.Table, len(pool))
	for i, req := range pool {
		prec := ops.BF16
		if req.Options.Precision == "fp32" {
			prec = ops.FP32
		}
		set := solo(t, ts.request(t, req), prec, req.Options.Float16)
		want[i] = map[string]*tables.Table{}
		for _, tab := range set.Tables() {
			want[i][tab.Name] = tab
		}
	}

	var st loadStats
	deadline := time.Now().Add(duration)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &loadClient{url: ts.url, hc: &http.Client{Transport: &http.Transport{}, Timeout: time.Minute},
				rng: rand.New(rand.NewPCG(uint64(c), 99)), pool: pool, want: want, stats: &st}
			for time.Now().Before(deadline) {
				if err := cl.one(); err != nil {
					errs <- fmt.Errorf("client %d: %w", c, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Every job the server still knows is over, none failed.
	var list []api.JobStatus
	code, body := ts.do(t, "GET", api.PathJobs, "")
	if code != http.StatusOK || json.Unmarshal(body, &list) != nil {
		t.Fatalf("list: %d %s", code, body)
	}
	for _, j := range list {
		if !j.State.Terminal() || j.State == api.StateFailed {
			t.Errorf("job %s after the load: %s %s", j.ID, j.State, j.Error)
		}
	}
	summary := fmt.Sprintf("load: %d clients for %.1f s: %d jobs submitted, %d done and checked (%d tables bit-identical to solo replays), "+
		"%d cancelled (%d cancels that came too late: done and checked), %d progress streams and %d table streams hung up mid-way, "+
		"%d jobs deleted, %d waves (%d shared by several jobs), 0 failed, 0 lost",
		clients, elapsed.Seconds(), st.submitted.Load(), st.done.Load(), st.tables.Load(), st.cancelled.Load(), st.lateCancels.Load(),
		st.progressHangups.Load(), st.tableHangups.Load(), st.deleted.Load(), waves.Load(), shared.Load())
	t.Log(summary)
	if out := os.Getenv("POTATO_RELIABILITY_OUT"); out != "" {
		appendLine(out, summary)
	}
	if st.done.Load() == 0 || st.cancelled.Load() == 0 || shared.Load() == 0 {
		t.Errorf("the load did not exercise everything: %s", summary)
	}
	if lost := st.submitted.Load() - st.done.Load() - st.cancelled.Load(); lost != 0 {
		t.Errorf("%d jobs neither done nor cancelled", lost)
	}
}

// appendLine appends line to the file at path (for the figures of docs/reliability.md).
func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		fmt.Fprintln(f, line)
		f.Close()
	}
}

// loadPool is the requests the clients draw from: every input kind and option, both precisions.
func loadPool() []api.Request {
	think, noThink := true, false
	conv := func(s string) json.RawMessage {
		return json.RawMessage(`{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "` + s + `"}, ` +
			`{"role": "assistant", "content": "ok", "reasoning_content": "short"}]}`)
	}
	var pool []api.Request
	for i := range 24 {
		var req api.Request
		switch i % 4 {
		case 0:
			req.Inputs = []api.Input{{Tokens: seq(11*i+1, 5+i)}}
		case 1:
			req.Inputs = []api.Input{api.TextInput(fmt.Sprintf("load test request %d: the quick brown fox", i)), {Tokens: seq(i, 3)}}
		case 2:
			req.Inputs = []api.Input{{Conversation: conv(fmt.Sprintf("question %d", i))}}
			req.Thinking = &think
			if i%8 == 6 {
				req.Inputs = []api.Input{{Conversation: json.RawMessage(`[{"role": "user", "content": "no thinking"}]`)}}
				req.Thinking = &noThink
			}
		case 3:
			req.Inputs = []api.Input{{Tokens: seq(3*i, 2)}, api.TextInput("x"), {Tokens: seq(5*i, 31)}}
		}
		o := &req.Options
		o.TopK = i % 6
		if i%3 == 0 {
			o.Lens = []int{i % 8, 7}
			if i%8 == 7 {
				o.Lens = []int{7} // a layer once (a repeat is refused)
			}
		}
		if i%5 == 1 {
			o.Hidden = []int{(i + 2) % 8}
			o.Float16 = i%2 == 0
		}
		o.Router = i%7 == 2
		o.AttnRes = i%6 == 3
		if i%11 == 4 {
			o.Precision = "fp32"
		}
		req.Label = fmt.Sprintf("pool %d", i)
		pool = append(pool, req)
	}
	return pool
}

// loadStats count what the clients did.
type loadStats struct {
	submitted, done, tables, cancelled, lateCancels, progressHangups, tableHangups, deleted atomic.Int64
}

// loadClient is one client of the load test, with its own connections.
type loadClient struct {
	url   string
	hc    *http.Client
	rng   *rand.Rand
	pool  []api.Request
	want  []map[string]*tables.Table
	stats *loadStats
}

// one submits one job from the pool and takes it to its end along a random path.
func (c *loadClient) one() error {
	i := c.rng.IntN(len(c.pool))
	st, err := c.submit(c.pool[i])
	if err != nil {
		return err
	}
	c.stats.submitted.Add(1)
	id := st.ID
	switch path := c.rng.IntN(10); {
	case path < 2: // cancel while it waits or runs
		wait := time.Duration(c.rng.IntN(3000)) * time.Microsecond // mostly queued or in its wave
		if c.rng.IntN(2) == 0 {
			wait = time.Duration(c.rng.IntN(400)) * time.Millisecond // often over already
		}
		time.Sleep(wait)
		code, body, err := c.do("POST", api.CancelPath(id))
		if err != nil {
			return err
		}
		switch code {
		case http.StatusOK:
			c.stats.cancelled.Add(1)
			final, err := c.waitTerminal(id)
			if err != nil {
				return err
			}
			if final.State != api.StateCancelled {
				return fmt.Errorf("job %s: cancel answered 200, then %s", id, final.State)
			}
			if code, _, _ := c.do("GET", api.TablePath(id, "tokens")); code != http.StatusConflict {
				return fmt.Errorf("job %s: fetching a cancelled job's table: %d", id, code)
			}
			return nil
		case http.StatusConflict: // it was over already: it must be done, and exact
			c.stats.lateCancels.Add(1)
		default:
			return fmt.Errorf("job %s: cancel: %d %s", id, code, body)
		}
	case path < 4: // follow the progress stream, but hang up after a line or two
		if err := c.progress(id, 1+c.rng.IntN(2)); err != nil {
			return err
		}
		c.stats.progressHangups.Add(1)
	default: // follow the progress stream to its end
		if err := c.progress(id, -1); err != nil {
			return err
		}
	}
	final, err := c.waitTerminal(id)
	if err != nil {
		return err
	}
	if final.State != api.StateDone {
		return fmt.Errorf("job %s (pool %d): %s %q", id, i, final.State, final.Error)
	}
	if len(final.Tables) != len(c.want[i]) {
		return fmt.Errorf("job %s (pool %d): tables %v, want %d", id, i, final.Tables, len(c.want[i]))
	}
	for _, name := range final.Tables {
		if c.rng.IntN(6) == 0 { // hang up after a few bytes of the stream
			if err := c.hangUpTable(id, name); err != nil {
				return err
			}
			c.stats.tableHangups.Add(1)
		}
		got, err := c.table(id, name)
		if err != nil {
			return err
		}
		err = tableDiff(got, c.want[i][name])
		got.Release()
		if err != nil {
			return fmt.Errorf("job %s (pool %d) table %s: %w", id, i, name, err)
		}
		c.stats.tables.Add(1)
	}
	c.stats.done.Add(1)
	if c.rng.IntN(3) == 0 {
		if code, body, err := c.do("DELETE", api.JobPath(id)); err != nil || code != http.StatusNoContent {
			return fmt.Errorf("job %s: delete: %d %s %v", id, code, body, err)
		}
		c.stats.deleted.Add(1)
	}
	return nil
}

func (c *loadClient) do(method, path string) (int, []byte, error) {
	req, err := http.NewRequest(method, c.url+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

func (c *loadClient) submit(r api.Request) (api.JobStatus, error) {
	var st api.JobStatus
	data, _ := json.Marshal(r)
	resp, err := c.hc.Post(c.url+api.PathJobs, api.ContentTypeJSON, bytes.NewReader(data))
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return st, fmt.Errorf("submit: %d %s", resp.StatusCode, body)
	}
	return st, json.Unmarshal(body, &st)
}

// progress reads job id's progress stream, all of it (lines < 0) or that many lines before hanging up.
// Every line must parse and name the job; the last of a full stream must be terminal.
func (c *loadClient) progress(id string, lines int) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.url+api.ProgressPath(id), nil)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("job %s: progress: %d", id, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	var p api.Progress
	n := 0
	for sc.Scan() {
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil || p.ID != id {
			return fmt.Errorf("job %s: progress line %q: %v", id, sc.Text(), err)
		}
		if n++; n == lines {
			return nil // hang up
		}
	}
	if lines < 0 && !p.State.Terminal() {
		return fmt.Errorf("job %s: the progress stream ended in state %s: %v", id, p.State, sc.Err())
	}
	return nil
}

// waitTerminal polls job id until it is over.
func (c *loadClient) waitTerminal(id string) (api.JobStatus, error) {
	var st api.JobStatus
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		code, body, err := c.do("GET", api.JobPath(id))
		if err != nil {
			return st, err
		}
		if code != http.StatusOK {
			return st, fmt.Errorf("job %s: status %d %s", id, code, body)
		}
		if err := json.Unmarshal(body, &st); err != nil {
			return st, err
		}
		if st.State.Terminal() {
			return st, nil
		}
	}
	return st, fmt.Errorf("job %s: still %s after a minute", id, st.State)
}

// hangUpTable starts fetching a table and hangs up after a few bytes.
func (c *loadClient) hangUpTable(id, name string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.url+api.TablePath(id, name), nil)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	var buf [64]byte
	io.ReadFull(resp.Body, buf[:])
	cancel()
	resp.Body.Close()
	return nil
}

func (c *loadClient) table(id, name string) (*tables.Table, error) {
	resp, err := c.hc.Get(c.url + api.TablePath(id, name))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("job %s table %s: %d %s", id, name, resp.StatusCode, body)
	}
	return tables.ReadIPC(resp.Body, nil)
}

// tableDiff is nil when got holds exactly want's schema (metadata included) and rows.
func tableDiff(got, want *tables.Table) error {
	if !got.Schema.Equal(want.Schema) || !sameProvenance(got, want) {
		return fmt.Errorf("schema %v, want %v", got.Schema, want.Schema)
	}
	g, w := got.ArrowTable(), want.ArrowTable()
	defer g.Release()
	defer w.Release()
	if !array.TableEqual(g, w) {
		return fmt.Errorf("%d rows differ from the solo replay's %d", g.NumRows(), w.NumRows())
	}
	return nil
}
