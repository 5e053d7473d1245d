package server

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay"
)

// A queued job that is cancelled never runs.
func TestCancelQueued(t *testing.T) {
	hooks, held, release := holdFirstWave()
	ts := startServer(t, Config{}, hooks)
	blocker := ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{1, 2}}}}).ID
	<-held
	id := ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{3, 4}}}}).ID
	code, body := ts.do(t, "POST", api.CancelPath(id), "")
	if code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, body)
	}
	if st := ts.status(t, id); st.State != api.StateCancelled || st.QueuePosition != 0 {
		t.Fatalf("after cancel: %s, queue position %d", st.State, st.QueuePosition)
	}
	close(release)
	ts.waitState(t, blocker, api.StateDone)
	later := ts.waitState(t, ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{5}}}}).ID, api.StateDone)
	if st := ts.status(t, id); st.State != api.StateCancelled || st.Wave != nil {
		t.Errorf("the cancelled job ran: %s in wave %v", st.State, st.Wave)
	}
	if slices.Contains(later.Wave.Jobs, id) {
		t.Errorf("the cancelled job rode wave %d", later.Wave.ID)
	}
	if code, body := ts.do(t, "POST", api.CancelPath(id), ""); code != http.StatusConflict {
		t.Errorf("second cancel: %d %s, want 409", code, body)
	}
	if code, _ := ts.do(t, "GET", api.TablePath(id, "tokens"), ""); code != http.StatusConflict {
		t.Errorf("fetching a cancelled job: %d, want 409", code)
	}
	if code, _ := ts.do(t, "POST", api.CancelPath(blocker), ""); code != http.StatusConflict {
		t.Errorf("cancelling a done job: %d, want 409", code)
	}
}

// waveGate holds the next wave to start after arm, at layer 1, until released, and records the last
// layer each held wave reported. Arming before the submission makes the held wave certain.
type waveGate struct {
	mu       sync.Mutex
	armed    bool
	target   int // the held wave, counted from 1 among the waves the gate saw start
	waves    int
	maxLayer map[int]int
	held     chan struct{}
	release  chan struct{}
}

func newWaveGate() *waveGate { return &waveGate{maxLayer: map[int]int{}} }

// arm makes the gate hold the next wave to start; it returns that wave's key for lastLayer.
func (g *waveGate) arm() {
	g.mu.Lock()
	g.armed, g.held, g.release = true, make(chan struct{}), make(chan struct{})
	g.mu.Unlock()
}

// lastLayer is the last layer the most recently held wave reported.
func (g *waveGate) lastLayer() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.maxLayer[g.target]
}

func (g *waveGate) hooks() testHooks {
	return testHooks{
		beforeWave: func([]string) {
			g.mu.Lock()
			g.waves++
			if g.armed {
				g.armed, g.target = false, g.waves
			}
			g.mu.Unlock()
		},
		afterLayer: func(p replay.Progress) {
			g.mu.Lock()
			in := g.waves == g.target
			if in {
				g.maxLayer[g.target] = p.Layer
			}
			held, release := g.held, g.release
			g.mu.Unlock()
			if in && p.Layer == 1 {
				close(held)
				<-release
			}
		},
	}
}

// A running job that is cancelled stops at once for its client; the wave goes on for the jobs that
// share it, and stops early when every job in it is cancelled.
func TestCancelRunning(t *testing.T) {
	gate := newWaveGate()
	hooks, firstHeld, firstRelease := holdFirstWave()
	gh := gate.hooks()
	hooks.afterLayer = gh.afterLayer
	before := hooks.beforeWave
	hooks.beforeWave = func(ids []string) { gh.beforeWave(ids); before(ids) }
	ts := startServer(t, Config{}, hooks)

	ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{1}}}})
	<-firstHeld
	cancelled := ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{7, 8, 9}}}}).ID
	kept := api.Request{Inputs: []api.Input{api.TextInput("the one that stays")}, Options: api.Options{TopK: 2}}
	keptID := ts.submit(t, kept).ID
	gate.arm() // the wave after the blocker's
	close(firstRelease)
	<-gate.held
	if code, body := ts.do(t, "POST", api.CancelPath(cancelled), ""); code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, body)
	}
	if st := ts.status(t, cancelled); st.State != api.StateCancelled {
		t.Fatalf("running job after cancel: %s", st.State)
	}
	close(gate.release)
	st := ts.waitState(t, keptID, api.StateDone)
	if !slices.Contains(st.Wave.Jobs, cancelled) {
		t.Fatalf("the two jobs did not share a wave: %v", st.Wave.Jobs)
	}
	if shared := gate.lastLayer(); shared != 8 {
		t.Errorf("the shared wave stopped at layer %d; the other job needed all 8", shared)
	}
	sameTable(t, keptID, ts.table(t, keptID, "tokens"), solo(t, ts.request(t, kept), 0, false).Tokens)
	if st := ts.status(t, cancelled); st.State != api.StateCancelled || len(st.Tables) != 0 {
		t.Errorf("cancelled job after its wave: %s, tables %v", st.State, st.Tables)
	}
	if files, _ := filepath.Glob(filepath.Join(ts.jobDir(cancelled), "*.parquet")); len(files) != 0 {
		t.Errorf("a cancelled job's tables were written: %v", files)
	}

	gate.arm()
	alone := ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{4, 4, 4}}}}).ID
	<-gate.held
	ts.do(t, "POST", api.CancelPath(alone), "")
	close(gate.release)
	after := ts.waitState(t, ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{5}}}}).ID, api.StateDone)
	if stopped := gate.lastLayer(); stopped >= 8 {
		t.Errorf("a wave whose only job was cancelled ran all %d layers", stopped)
	}
	if after.Wave.ID <= 2 {
		t.Errorf("the next job rode wave %d", after.Wave.ID)
	}
	if st := ts.status(t, alone); st.State != api.StateCancelled {
		t.Errorf("alone: %s", st.State)
	}
}

// DELETE forgets a job and its files.
func TestForget(t *testing.T) {
	ts := startServer(t, Config{}, testHooks{})
	id := ts.waitState(t, ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{1, 2}}}}).ID, api.StateDone).ID
	if code, body := ts.do(t, "DELETE", api.JobPath(id), ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", code, body)
	}
	if code, _ := ts.do(t, "GET", api.JobPath(id), ""); code != http.StatusNotFound {
		t.Errorf("status after delete: %d", code)
	}
	if _, err := os.Stat(ts.jobDir(id)); !os.IsNotExist(err) {
		t.Errorf("files after delete: %v", err)
	}
}
