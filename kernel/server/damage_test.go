package server

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// A model directory damaged on disk while the server has it open: the job whose wave reads the damage
// fails with the shard file and the tensor named; jobs that do not read it, and every job once the file
// is repaired, are done with exactly the tables of a solo replay on the undamaged model.

// copyModel copies the tiny model into a directory the test may damage.
func copyModel(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(modelDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// startOn starts a server like startServer, on model directory dir.
func startOn(t *testing.T, dir string, cfg Config, hooks testHooks) *testServer {
	t.Helper()
	cfg.ModelDir, cfg.SpillDir, cfg.Gather = dir, t.TempDir(), -1
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
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
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return &testServer{Server: s, url: "http://" + l.Addr().String(), hc: &http.Client{}}
}

// tensorIn locates a tensor of dir.
func tensorIn(t *testing.T, dir, name string) checkpoint.Tensor {
	t.Helper()
	d, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	tn, ok := d.Lookup(name)
	if !ok {
		t.Fatalf("no tensor %s", name)
	}
	return tn
}

// overwrite writes b at off of dir/file in place and returns the repair.
func overwrite(t *testing.T, dir, file string, off int64, b []byte) func() {
	t.Helper()
	path := filepath.Join(dir, file)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old := make([]byte, len(b))
	if _, err := f.ReadAt(old, off); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	return func() {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		f.WriteAt(old, off)
	}
}

// failedNaming waits for job id to fail and checks its error names each of want.
func (ts *testServer) failedNaming(t *testing.T, id string, want ...string) api.JobStatus {
	t.Helper()
	st := ts.waitState(t, id, api.StateFailed)
	for _, w := range want {
		if !strings.Contains(st.Error, w) {
			t.Errorf("job %s failed with %q, which does not say %q", id, st.Error, w)
		}
	}
	return st
}

// doneAsSolo waits for job id to be done and checks its tokens table against a solo replay of req.
func (ts *testServer) doneAsSolo(t *testing.T, id string, req api.Request) api.JobStatus {
	t.Helper()
	st := ts.waitState(t, id, api.StateDone)
	sameTable(t, id, ts.table(t, id, "tokens"), solo(t, ts.request(t, req), ops.BF16, false).Tokens)
	return st
}

// expertChoice finds, at MoE layer layer of the undamaged model, an expert that the one-token sequence
// [hit] routes to and [miss] does not.
func expertChoice(t *testing.T, layer int) (expert int, hit, miss int32) {
	t.Helper()
	o, err := OpenCPU(context.Background(), modelDir, ops.BF16, replay.EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	routed := func(id int32) []int32 {
		res, _, err := o.Engine.Run(context.Background(), []replay.Request{{Sequences: []replay.Sequence{{Tokens: []int32{id}}},
			Options: replay.Options{Router: true}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res[0][0].Router {
			if r.Layer == layer {
				return r.IDs
			}
		}
		t.Fatalf("no routing at layer %d", layer)
		return nil
	}
	first := routed(0)
	for id := int32(1); id < 200; id++ {
		for _, x := range first {
			if !slices.Contains(routed(id), x) {
				return int(x), 0, id
			}
		}
	}
	t.Fatal("every token routes alike")
	return
}

// An E8M0 scale of 255 in one routed expert: the job whose tokens choose it fails naming the shard and
// the scale tensor; a job that does not choose it is done and exact, in a later wave and in the very
// wave that failed (a wave that fails is retried one job at a time, so that a job gets what it would
// have got alone); after the repair the failed job's input is done and exact.
func TestServerBadExpertScale(t *testing.T) {
	dir := copyModel(t)
	hooks, held, release := holdFirstWave()
	ts := startOn(t, dir, Config{}, hooks)
	const layer = 3
	expert, hit, miss := expertChoice(t, layer)
	name := model.ExpertPrefix(layer, expert) + "w1.weight_scale"
	tn := tensorIn(t, dir, name)
	hitReq := api.Request{Inputs: []api.Input{{Tokens: []int32{hit}}}, Options: api.Options{TopK: 2}}
	missReq := api.Request{Inputs: []api.Input{{Tokens: []int32{miss}}}, Options: api.Options{TopK: 2}}

	blocker := ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{miss, miss}}}}).ID
	<-held
	repair := overwrite(t, dir, tn.File, tn.Offset+3, []byte{255})
	var ids [2]string
	var wg sync.WaitGroup
	for i, r := range []api.Request{hitReq, missReq} { // queued together: they share the next wave
		wg.Add(1)
		go func() { defer wg.Done(); ids[i] = ts.submit(t, r).ID }()
	}
	wg.Wait()
	close(release)
	ts.waitState(t, blocker, api.StateDone)
	failed := ts.failedNaming(t, ids[0], tn.File, name, "255")
	done := ts.doneAsSolo(t, ids[1], missReq)
	if !slices.Contains(failed.Wave.Jobs, ids[0]) || done.Wave == nil {
		t.Errorf("waves: failed job %v, done job %v", failed.Wave, done.Wave)
	}
	ts.doneAsSolo(t, ts.submit(t, missReq).ID, missReq) // a later wave that does not read it
	ts.failedNaming(t, ts.submit(t, hitReq).ID, tn.File, name, "255")

	repair()
	ts.doneAsSolo(t, ts.submit(t, hitReq).ID, hitReq)
}

// A bf16 NaN in a layer weight and a shard truncated inside a tensor: every job fails naming the shard
// and the tensor while the damage is there; the server stays up, and once the file is repaired the next
// job is done and exact.
func TestServerDamagedLayer(t *testing.T) {
	dir := copyModel(t)
	ts := startOn(t, dir, Config{}, testHooks{})
	req := api.Request{Inputs: []api.Input{api.TextInput("damage on disk"), {Tokens: []int32{5, 6, 7}}}, Options: api.Options{TopK: 3}}
	ts.doneAsSolo(t, ts.submit(t, req).ID, req)

	nanName := model.LayerPrefix(5) + "self_attention_res_proj.weight"
	nan := tensorIn(t, dir, nanName)
	repair := overwrite(t, dir, nan.File, nan.Offset+4, binary.LittleEndian.AppendUint16(nil, 0x7fc0))
	st := ts.failedNaming(t, ts.submit(t, req).ID, nan.File, nanName, "NaN")
	if !strings.Contains(st.Error, "after layer 5 of 8") {
		t.Errorf("the failure does not say where the wave was: %q", st.Error)
	}
	repair()
	ts.doneAsSolo(t, ts.submit(t, req).ID, req)

	cut := tensorIn(t, dir, model.LayerPrefix(6)+"input_layernorm.weight")
	path := filepath.Join(dir, cut.File)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, cut.Offset+cut.Size/2); err != nil {
		t.Fatal(err)
	}
	ts.failedNaming(t, ts.submit(t, req).ID, cut.File, "tensor "+model.LayerPrefix(6), "unexpected EOF")
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(whole, 0)
	f.Close()
	ts.doneAsSolo(t, ts.submit(t, req).ID, req)
	if code, _ := ts.do(t, "GET", api.PathHealth, ""); code != http.StatusOK {
		t.Errorf("health after the damage: %d", code)
	}
}
