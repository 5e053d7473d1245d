package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// tinyModel writes the tiny synthetic model with `potato synth`.
func tinyModel(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := run(context.Background(), []string{"synth", "-q", "--preset", "tiny", "--out", dir}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// potato serve refuses to listen beyond loopback without a token, and refuses a weak token.
func TestServeRefusals(t *testing.T) {
	model := tinyModel(t)
	short := filepath.Join(t.TempDir(), "token")
	os.WriteFile(short, []byte("letmein\n"), 0o600)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, "is reachable from other machines: give a bearer token (--token-file)"},
		{[]string{"--listen", ":0"}, "is reachable from other machines"},
		{[]string{"--token-file", short}, "the token has 7 characters, want at least 16"},
		{[]string{"--precision", "fp8"}, "fp8"},
		{[]string{"--slice-tokens", "-1"}, "--slice-tokens -1 is negative"},
		{[]string{"--devices", "3"}, "--devices 3: the cpu backend has device 0 alone"},
	} {
		args := append([]string{"serve", "--model", model, "--spill", t.TempDir()}, tt.args...)
		var stdout bytes.Buffer
		err := run(context.Background(), args, &stdout)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("potato %v: %v, want …%s…", tt.args, err, tt.want)
		}
		if strings.Contains(stdout.String(), "listening") { // before, 0.0.0.0 printed it, then refused
			t.Errorf("potato %v printed %q before refusing", tt.args, stdout.String())
		}
	}
}

// potato serve writes its state file once it listens, answers, and on a signal (here the context's
// end) stops cleanly and removes the state file.
func TestServeUntilSignal(t *testing.T) {
	model := tinyModel(t)
	state := filepath.Join(t.TempDir(), "serve.json")
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	var out bytes.Buffer
	go func() {
		done <- run(ctx, []string{"serve", "--model", model, "--listen", "127.0.0.1:0", "--spill", t.TempDir(),
			"--state-file", state, "--gather", "0", "--max-result-bytes", "1kB"}, &out)
	}()
	var st api.State
	for deadline := time.Now().Add(30 * time.Second); ; {
		data, err := os.ReadFile(state)
		if err == nil && json.Unmarshal(data, &st) == nil {
			break
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("no state file after 30s: %v", <-done)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.PID != os.Getpid() || !strings.HasPrefix(st.Addr, "http://127.0.0.1:") || st.Model != model {
		t.Errorf("state: %+v", st)
	}
	resp, err := http.Get(st.Addr + api.PathHealth)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("health: %d", resp.StatusCode)
	}
	// --max-result-bytes reaches the server: it says so, and refuses what would pass it
	var info api.Info
	if resp, err := http.Get(st.Addr + api.PathInfo); err != nil || json.NewDecoder(resp.Body).Decode(&info) != nil || info.Limits.MaxResultBytes != 1000 {
		t.Errorf("info: limits %+v (%v), want max_result_bytes 1000", info.Limits, err)
	}
	resp, err = http.Post(st.Addr+api.PathJobs, api.ContentTypeJSON, strings.NewReader(`{"inputs": [{"tokens": [1, 2, 3]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var e api.Error
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || e.Limit != "--max-result-bytes" {
		t.Errorf("a job past --max-result-bytes 1kB: %d %+v", resp.StatusCode, e)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("serve after its signal: %v", err)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("state file after exit: %v", err)
	}
	if !strings.Contains(out.String(), "listening on "+st.Addr) {
		t.Errorf("output: %q", out.String())
	}
}
