package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// firstIDs is the token ids 1..n.
func firstIDs(n int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(i + 1)
	}
	return ids
}

// resultLimits are the requests of the --max-result-bytes tests and a limit that holds one small
// request's results but not two, nor one big request's.
func resultLimits(t *testing.T) (small, big api.Request, limit int64) {
	t.Helper()
	small = api.Request{Inputs: []api.Input{{Tokens: firstIDs(300)}}, Options: api.Options{TopK: 64, LensAll: true}}
	big = api.Request{Inputs: []api.Input{{Tokens: firstIDs(300)}}, Options: api.Options{TopK: 1024, LensAll: true}}
	probe := startServer(t, Config{}, testHooks{})
	s, b := probe.estimate(probe.request(t, small), false).Total(), probe.estimate(probe.request(t, big), false).Total()
	limit = s * 3 / 2
	if b <= limit {
		t.Fatalf("estimates: small %d, big %d: the big request fits %d", s, b, limit)
	}
	return small, big, limit
}

// A request whose results would pass --max-result-bytes is a 413 naming it, before anything is queued
// (the audit's request took a server from 50 MB to 4.1 GB); one within it is accepted.
func TestMaxResultBytes(t *testing.T) {
	small, big, limit := resultLimits(t)
	ts := startServer(t, Config{Limits: api.Limits{MaxResultBytes: limit}}, testHooks{})
	code, body := ts.do(t, "POST", api.PathJobs, jsonBody(big))
	var e api.Error
	json.Unmarshal(body, &e)
	want := fmt.Sprintf("for 8 lens and 0 hidden layers and top_k 1024 over 300 tokens (ask for fewer layers or a smaller top_k, or split the request): the limit is %d (--max-result-bytes)", limit)
	if code != http.StatusRequestEntityTooLarge || e.Limit != "--max-result-bytes" ||
		!strings.HasPrefix(e.Error, "the results would hold about ") || !strings.Contains(e.Error, want) {
		t.Errorf("(-want +got):\n-413 --max-result-bytes …%s\n+%d %s %s", want, code, e.Limit, e.Error)
	}
	if len(ts.jobs) != 0 {
		t.Errorf("%d jobs queued by a refused request", len(ts.jobs))
	}
	ts.waitState(t, ts.submit(t, small).ID, api.StateDone)
}

// A wave's results stay within --max-result-bytes: two requests that fit it alone but not together
// ride separate waves, in arrival order.
func TestMaxResultBytesSplitsAWave(t *testing.T) {
	small, _, limit := resultLimits(t)
	hooks, held, release := holdFirstWave()
	ts := startServer(t, Config{Limits: api.Limits{MaxResultBytes: limit}}, hooks)
	blocker := ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{1}}}}).ID
	<-held
	a, b := ts.submit(t, small).ID, ts.submit(t, small).ID
	close(release)
	ts.waitState(t, blocker, api.StateDone)
	wa, wb := ts.waitState(t, a, api.StateDone).Wave, ts.waitState(t, b, api.StateDone).Wave
	if wa.ID >= wb.ID || len(wa.Jobs) != 1 || len(wb.Jobs) != 1 {
		t.Errorf("waves %d %v and %d %v: want one job each, in order", wa.ID, wa.Jobs, wb.ID, wb.Jobs)
	}
}

// The results of a wave still being written count against the next wave: a job that would not fit
// beside them waits for them, and then runs.
func TestMaxResultBytesWaitsForSpills(t *testing.T) {
	small, _, limit := resultLimits(t)
	inSpill, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hooks := testHooks{spillBatch: func(string, string) error {
		once.Do(func() { close(inSpill); <-release })
		return nil
	}}
	ts := startServer(t, Config{Limits: api.Limits{MaxResultBytes: limit}}, hooks)
	a := ts.submit(t, small).ID
	<-inSpill
	b := ts.submit(t, small).ID
	time.Sleep(300 * time.Millisecond) // a free engine would have started b's wave by now
	if st := ts.status(t, b); st.State != api.StateQueued {
		t.Errorf("a job that does not fit beside the results being written: %s, want queued", st.State)
	}
	close(release)
	if wa, wb := ts.waitState(t, a, api.StateDone).Wave, ts.waitState(t, b, api.StateDone).Wave; wa.ID == wb.ID {
		t.Errorf("both jobs rode wave %d", wa.ID)
	}
}

// A job cancelled after its wave, while its tables are written, stops there: no batch is built after
// the cancel, no table is left (before, the server built and wrote every table, 1.4 to 4.1 GB, and
// then deleted them).
func TestCancelWhileSpilling(t *testing.T) {
	inSpill, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var batches []string
	hooks := testHooks{spillBatch: func(_, table string) error {
		mu.Lock()
		batches = append(batches, table)
		first := len(batches) == 1
		mu.Unlock()
		if first {
			close(inSpill)
			<-release
		}
		return nil
	}}
	ts := startServer(t, Config{}, hooks)
	id := ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{3, 1, 4, 1, 5}}}, Options: api.Options{TopK: 3, Lens: []int{0, 7}}}).ID
	<-inSpill
	if code, body := ts.do(t, "POST", api.CancelPath(id), ""); code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, body)
	}
	close(release)
	ts.spills.Wait()
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(batches, []string{"tokens"}) {
		t.Errorf("batches asked for after the cancel: %v, want only the first tokens batch, before it", batches)
	}
	if st := ts.status(t, id); st.State != api.StateCancelled || len(st.Tables) != 0 {
		t.Errorf("after the spill: %s, tables %v", st.State, st.Tables)
	}
	entries, _ := os.ReadDir(ts.jobDir(id))
	for _, e := range entries {
		if e.Name() != manifestName {
			t.Errorf("left in the job's directory: %s", e.Name())
		}
	}
}

// A job whose tables cannot be written fails, and its manifest says so: a restarted server reports that
// failure, not a crash (before, job.json still said running).
func TestSpillFailureIsPersisted(t *testing.T) {
	spill := t.TempDir()
	// A directory where the tokens table goes: the set's rename fails, as on a full disk.
	hooks := testHooks{beforeWave: func(ids []string) {
		for _, id := range ids {
			os.MkdirAll(filepath.Join(spill, id, "result.tokens.parquet", "x"), 0o700)
		}
	}}
	ts := startServerNoCleanup(t, Config{SpillDir: spill}, hooks)
	id := ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{1, 2, 3}}}}).ID
	st := ts.waitState(t, id, api.StateFailed)
	if !strings.HasPrefix(st.Error, "writing the results: ") {
		t.Fatalf("error %q, want a write failure", st.Error)
	}
	if err := ts.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if m, err := readManifest(filepath.Join(spill, id)); err != nil || m.Status.State != api.StateFailed || m.Status.Error != st.Error {
		t.Errorf("manifest: %s %q (%v), want failed %q", m.Status.State, m.Status.Error, err, st.Error)
	}
	ts2 := startServer(t, Config{SpillDir: spill}, testHooks{})
	if again := ts2.status(t, id); again.State != api.StateFailed || again.Error != st.Error {
		t.Errorf("after a restart: %s %q, want failed %q", again.State, again.Error, st.Error)
	}
}
