package server

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// A job larger than --max-wave-tokens is replayed in several waves of at most that many tokens (the
// bound on the per-token state a wave holds on the device), with tables equal to a solo replay; a single
// sequence that no wave can hold is refused at submission with the limit named, never run out of memory.
func TestMaxWaveTokensSplitsAJob(t *testing.T) {
	const maxWave = 24
	var mu sync.Mutex
	var waveTokens []int // the tokens of the engine wave each layer report belongs to
	hooks := testHooks{afterLayer: func(p replay.Progress) {
		mu.Lock()
		waveTokens = append(waveTokens, p.Tokens)
		mu.Unlock()
	}}
	ts := startServer(t, Config{Limits: api.Limits{MaxWaveTokens: maxWave, MaxSequenceTokens: 64}}, hooks)
	req := api.Request{Inputs: []api.Input{
		{Tokens: seq(1, 20)}, api.TextInput("a request larger than one wave"), {Tokens: seq(40, 17)},
		{Tokens: seq(90, 24)}, {Tokens: seq(7, 3)},
	}, Options: api.Options{TopK: 4, Lens: []int{1, 6}, Hidden: []int{3}, Router: true, AttnRes: true}}
	rr := ts.request(t, req)
	total := 0
	for _, s := range rr.Sequences {
		total += len(s.Tokens)
	}
	if total <= 2*maxWave {
		t.Fatalf("the request has %d tokens: too few to need three waves of %d", total, maxWave)
	}
	st := ts.waitState(t, ts.submit(t, req).ID, api.StateDone)
	want := solo(t, rr, ops.BF16, false)
	for _, tab := range want.Tables() {
		sameTable(t, st.ID, ts.table(t, st.ID, tab.Name), tab)
	}
	mu.Lock()
	defer mu.Unlock()
	waves := 0
	for i, n := range waveTokens {
		if n > maxWave {
			t.Fatalf("layer report %d belongs to a wave of %d tokens, past --max-wave-tokens %d", i, n, maxWave)
		}
		if i%8 == 0 {
			waves++
		}
	}
	if min := (total + maxWave - 1) / maxWave; waves < min {
		t.Errorf("%d tokens ran in %d engine waves, want at least %d", total, waves, min)
	}

	code, body := ts.do(t, "POST", api.PathJobs, jsonBody(api.Request{Inputs: []api.Input{{Tokens: seq(1, maxWave+1)}}}))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "--max-wave-tokens") ||
		!strings.Contains(string(body), "inputs[0] has 25 tokens") {
		t.Errorf("a sequence longer than a wave: %d %s, want 413 naming --max-wave-tokens", code, body)
	}
}

// seq is n token ids from first, wrapping inside the BPE part of the tiny vocabulary.
func seq(first, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32((first + 7*i) % 3000)
	}
	return out
}
