package server

import (
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// holdFirstWave returns hooks that hold the first wave before it runs until release is closed, and a
// channel closed when the first wave is held.
func holdFirstWave() (testHooks, chan struct{}, chan struct{}) {
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	return testHooks{beforeWave: func([]string) {
		first := false
		once.Do(func() { first = true })
		if first {
			close(held)
			<-release
		}
	}}, held, release
}

// Two clients submit while the engine is busy: their jobs ride the next wave together, and each gets
// exactly what it would have got alone (the wave computes the union of their options and splits it).
func TestTwoClientsShareAWave(t *testing.T) {
	hooks, held, release := holdFirstWave()
	ts := startServer(t, Config{}, hooks)
	blocker := ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{1, 2, 3}}}})
	<-held

	reqs := []api.Request{
		{Inputs: []api.Input{api.TextInput("The quick brown fox"), {Tokens: []int32{5, 6, 7, 8}}},
			Options: api.Options{TopK: 3, Lens: []int{1, 7}}},
		{Inputs: []api.Input{api.TextInput("jumps over the lazy dog, twice.")},
			Options: api.Options{TopK: 5, Hidden: []int{2}, Router: true, AttnRes: true, Float16: true}},
	}
	ids := make([]string, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() { // each client has its own connection
			defer wg.Done()
			c := &testServer{Server: ts.Server, url: ts.url, hc: &http.Client{Transport: &http.Transport{}}}
			ids[i] = c.submit(t, r).ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if st := ts.status(t, id); st.State != api.StateQueued {
			t.Fatalf("job %s: %s while the first wave is held, want queued", id, st.State)
		}
	}
	close(release)

	first := ts.waitState(t, blocker.ID, api.StateDone)
	var sts []api.JobStatus
	for _, id := range ids {
		sts = append(sts, ts.waitState(t, id, api.StateDone))
	}
	if first.Wave.ID == sts[0].Wave.ID {
		t.Fatalf("the blocker and the clients' jobs rode one wave (%d)", first.Wave.ID)
	}
	w := sts[0].Wave
	if sts[1].Wave.ID != w.ID || !slices.Equal(w.Jobs, ids) && !slices.Equal(w.Jobs, []string{ids[1], ids[0]}) {
		t.Fatalf("jobs in waves %d and %d, wave jobs %v, want both of %v in one", w.ID, sts[1].Wave.ID, w.Jobs, ids)
	}
	if w.Tokens != sts[0].Tokens+sts[1].Tokens || w.Sequences != 3 {
		t.Errorf("wave: %d sequences, %d tokens; want 3 and %d+%d", w.Sequences, w.Tokens, sts[0].Tokens, sts[1].Tokens)
	}
	if w.BytesRead <= 0 {
		t.Errorf("wave read %d bytes", w.BytesRead)
	}
	for i, st := range sts {
		want := solo(t, ts.request(t, reqs[i]), ops.BF16, reqs[i].Options.Float16)
		var names []string
		for _, tab := range want.Tables() {
			names = append(names, tab.Name)
		}
		if !slices.Equal(st.Tables, names) {
			t.Fatalf("job %s: tables %v, want %v", st.ID, st.Tables, names)
		}
		for _, name := range names {
			sameTable(t, st.ID, ts.table(t, st.ID, name), want.Table(name))
		}
	}
}

// A request for fp32 opens the second engine on first use and its results say fp32.
func TestPrecisionOpensLazily(t *testing.T) {
	ts := startServer(t, Config{}, testHooks{})
	if open := ts.Info().Open; !slices.Equal(open, []string{"bf16"}) {
		t.Fatalf("open engines at start: %v, want [bf16]", open)
	}
	req := api.Request{Inputs: []api.Input{{Tokens: []int32{9, 8, 7, 6, 5}}}, Options: api.Options{Precision: "fp32", TopK: 2}}
	st := ts.waitState(t, ts.submit(t, req).ID, api.StateDone)
	if st.Precision != "fp32" {
		t.Errorf("precision %q, want fp32", st.Precision)
	}
	want := solo(t, ts.request(t, req), ops.FP32, false)
	sameTable(t, st.ID, ts.table(t, st.ID, "tokens"), want.Tokens)
	if open := ts.Info().Open; !slices.Equal(open, []string{"bf16", "fp32"}) {
		t.Errorf("open engines after an fp32 job: %v, want [bf16 fp32]", open)
	}
}
