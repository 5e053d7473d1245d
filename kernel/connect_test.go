package kernel

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/potato-k3/potato-k3/datasets"
	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/kernel/server"
	"github.com/potato-k3/potato-k3/replay/demomodel"
	"github.com/potato-k3/potato-k3/replay/synth"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// The first Connect starts potato serve in the background; the next reuses it; Shutdown stops it.
func TestConnectStartsBackgroundEngine(t *testing.T) {
	ctx := context.Background()
	if err := Shutdown(); err != nil { // an engine left by another test
		t.Fatal(err)
	}
	c1, err := Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	h1, err := c1.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h1.PID == os.Getpid() || !alive(h1.PID) {
		t.Fatalf("engine pid %d", h1.PID)
	}
	dir, _ := stateDir()
	st, err := readState(dir)
	if err != nil || st.PID != h1.PID || !strings.HasPrefix(c1.Addr(), "unix:") || st.Addr != c1.Addr() {
		t.Fatalf("state file: %+v (%v); client at %s", st, err, c1.Addr())
	}
	c2, err := Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if h2, _ := c2.Health(ctx); h2.PID != h1.PID {
		t.Fatalf("second Connect reached pid %d, want the running %d", h2.PID, h1.PID)
	}
	info, err := c2.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	def, err := demomodel.Dir(ctx, nil) // the embedded default, in the test's cache directory
	if err != nil {
		t.Fatal(err)
	}
	if info.ModelDir != def || info.Layers != 8 {
		t.Errorf("background engine model %s (%d layers), want the default %s", info.ModelDir, info.Layers, def)
	}
	res, err := c2.Replay(ctx, Text("from the background"), TopK(1))
	if err != nil {
		t.Fatal(err)
	}
	res.Release()
	if _, err := Connect(WithModel(modelDir)); err == nil || !strings.Contains(err.Error(), "call kernel.Shutdown() first") {
		t.Errorf("Connect on another model while the default runs: %v", err)
	}

	if err := Shutdown(); err != nil {
		t.Fatal(err)
	}
	if alive(h1.PID) {
		t.Errorf("engine pid %d alive after Shutdown", h1.PID)
	}
	if _, err := readState(dir); !os.IsNotExist(err) {
		t.Errorf("state file after Shutdown: %v", err)
	}
	if _, err := Connect(WithoutStart()); err == nil || !strings.Contains(err.Error(), "no engine is running") {
		t.Errorf("Connect(WithoutStart) with no engine: %v", err)
	}
	if err := Shutdown(); err != nil {
		t.Errorf("Shutdown with no engine: %v", err)
	}
}

// An engine that dies at start is reported with its log; one that never answers is stopped.
func TestConnectStartFailure(t *testing.T) {
	t.Setenv(EnvCache, t.TempDir())
	script := filepath.Join(t.TempDir(), "potato")
	os.WriteFile(script, []byte("#!/bin/sh\necho \"potato: no such model: boom\" >&2\nexit 3\n"), 0o755)
	t.Setenv(EnvBin, script)
	_, err := Connect()
	if err == nil || !strings.Contains(err.Error(), "exited (exit status 3) before it answered") ||
		!strings.Contains(err.Error(), "potato: no such model: boom") {
		t.Fatalf("engine that dies: %v", err)
	}
	os.WriteFile(script, []byte("#!/bin/sh\necho waiting\nexec sleep 30\n"), 0o755)
	start := time.Now()
	_, err = Connect(WithStartTimeout(300 * time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "did not answer within 300ms") || !strings.Contains(err.Error(), "waiting") {
		t.Fatalf("engine that never answers: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("the timeout took %s", time.Since(start))
	}
}

// A $POTATO_BIN that cannot start, or that exits before it answers, is named as $POTATO_BIN in the error,
// so that a stale setting is found (it read "starting /nonexistent/potato: fork/exec ...", not saying
// where the path came from).
func TestConnectBadPotatoBin(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain") // not executable
	os.WriteFile(plain, []byte("#!/bin/sh\nexit 0\n"), 0o644)
	exits := filepath.Join(dir, "exits")
	os.WriteFile(exits, []byte("#!/bin/sh\necho \"not the engine\" >&2\nexit 2\n"), 0o755)
	for _, tt := range []struct {
		name, bin string
		want      []string
	}{
		{"no such file", "/nonexistent/potato", []string{
			"kernel: starting /nonexistent/potato (named by $POTATO_BIN): fork/exec /nonexistent/potato: no such file or directory: set POTATO_BIN to a built potato (`go build -o potato ./cmd/potato` in a checkout of potato-k3), or unset it to use one beside this program or on PATH"}},
		{"a directory", dir, []string{"kernel: starting " + dir + " (named by $POTATO_BIN): fork/exec " + dir + ": permission denied: set POTATO_BIN"}},
		{"not executable", plain, []string{"kernel: starting " + plain + " (named by $POTATO_BIN): fork/exec " + plain + ": permission denied"}},
		{"exits at once", exits, []string{"kernel: potato serve exited (exit status 2) before it answered (it is $POTATO_BIN, " + exits + "); last lines of ", "not the engine"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvCache, t.TempDir())
			t.Setenv(EnvBin, tt.bin)
			_, err := Connect()
			for _, want := range tt.want {
				if got := errText(err); !strings.Contains(got, want) {
					t.Errorf("(-want +got):\n-…%s…\n+%s", want, got)
				}
			}
		})
	}
}

// Without a potato binary Connect says, before it waits, that it compiles the engine with go run; and when
// go run fails (outside the module, as a built program run elsewhere is), the error says how to give it
// a built potato.
func TestConnectGoRunFailure(t *testing.T) {
	t.Setenv(EnvCache, t.TempDir())
	t.Setenv(EnvBin, "")
	bin := t.TempDir() // PATH: a go that fails as go run does outside the module, and no potato
	os.WriteFile(filepath.Join(bin, "go"), []byte("#!/bin/sh\necho \"no required module provides package $2: go.mod file not found in current directory or any parent directory; see 'go help modules'\" >&2\nexit 1\n"), 0o755)
	t.Setenv("PATH", bin)
	var progress strings.Builder
	_, err := Connect(WithProgress(&progress))
	if !strings.Contains(progress.String(), "compiling the engine with `go run github.com/potato-k3/potato-k3/cmd/potato`") ||
		strings.Count(progress.String(), "\n") != 1 {
		t.Errorf("the notice before go run: %q", progress.String())
	}
	for _, want := range []string{"exited (exit status 1) before it answered", "works only inside the potato-k3 module",
		"set POTATO_BIN to a built potato (`go build -o potato ./cmd/potato`", "go.mod file not found"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("go run that fails: %v\nwant it to say %q", err, want)
		}
	}
}

// $POTATO_ADDR picks the engine, here on a unix socket; one that does not answer is an error.
func TestConnectEnvAddr(t *testing.T) {
	sock, err := os.MkdirTemp("", "k")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sock)
	addr := startServer(t, "unix:"+filepath.Join(sock, "s"), server.Config{})
	t.Setenv(EnvAddr, addr)
	c, err := Connect(WithoutStart())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if info, err := c.Info(context.Background()); err != nil || info.ModelDir != modelDir {
		t.Fatalf("info over %s: %+v %v", addr, info, err)
	}
	t.Setenv(EnvAddr, "unix:"+filepath.Join(sock, "nobody"))
	if _, err := Connect(); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Errorf("Connect to a dead address: %v", err)
	}
}

// The bearer token goes with every request.
func TestConnectToken(t *testing.T) {
	const token = "a-token-of-some-length"
	addr := startServer(t, "127.0.0.1:0", server.Config{Token: token})
	if _, err := Connect(WithAddr(addr)); err == nil || !strings.Contains(err.Error(), "refused us (check POTATO_TOKEN)") ||
		!strings.Contains(err.Error(), "401") {
		t.Errorf("without the token: %v", err)
	}
	t.Setenv(EnvToken, token)
	c, err := Connect(WithAddr(addr))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Replay(context.Background(), Tokens(1, 2)); err != nil {
		t.Error(err)
	}
}

// CacheDir follows the rule synth.CacheDir follows, so the default model and the engine's files share
// a directory.
func TestCacheDirAgrees(t *testing.T) {
	for _, v := range []string{"/some/cache", ""} {
		t.Setenv(EnvCache, v)
		got, err1 := CacheDir()
		want, err2 := synth.CacheDir()
		if got != want || (err1 == nil) != (err2 == nil) {
			t.Errorf("POTATO_CACHE=%q: kernel %q %v, synth %q %v", v, got, err1, want, err2)
		}
	}
}

// A conversation goes over the wire exactly: the engine's reader gets back what Chat was given.
func TestConversationWire(t *testing.T) {
	for i, conv := range datasets.Examples() {
		for _, th := range []tokenizer.Thinking{tokenizer.ThinkingOn, tokenizer.ThinkingOff} {
			conv.Thinking = th
			var r api.Request
			if err := Chat(conv).apply(&r); err != nil {
				t.Fatal(err)
			}
			back, err := datasets.ReadJSON(strings.NewReader("["+string(r.Inputs[0].Conversation)+"]"), "wire")
			if err != nil {
				t.Fatalf("example %d: %v\n%s", i, err, r.Inputs[0].Conversation)
			}
			if !reflect.DeepEqual(back[0], conv) {
				t.Errorf("example %d thinking %d:\n got  %+v\n want %+v", i, th, back[0], conv)
			}
		}
	}
}

// Batches of one table become one record.
func TestConcat(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int32},
		{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)}}, nil)
	mk := func(vals ...int32) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		defer b.Release()
		for _, v := range vals {
			b.Field(0).(*array.Int32Builder).Append(v)
			lb := b.Field(1).(*array.ListBuilder)
			lb.Append(true)
			lb.ValueBuilder().(*array.Int32Builder).AppendValues([]int32{v, v}, nil)
		}
		return b.NewRecordBatch()
	}
	recs := []arrow.RecordBatch{mk(1, 2), mk(), mk(3)}
	got, err := concat(schema, recs)
	if err != nil {
		t.Fatal(err)
	}
	want := mk(1, 2, 3)
	if !array.RecordEqual(got, want) {
		t.Errorf("concat: %v, want %v", got, want)
	}
	if empty, err := concat(schema, nil); err != nil || empty.NumRows() != 0 || !empty.Schema().Equal(schema) {
		t.Errorf("concat of nothing: %v %v", empty, err)
	}
}
