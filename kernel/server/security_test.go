package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// The default address is loopback: a server started without --listen is reachable from this machine only.
func TestDefaultListenIsLoopback(t *testing.T) {
	host, _, err := net.SplitHostPort(DefaultListen)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Fatalf("DefaultListen %s is not a loopback address", DefaultListen)
	}
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !LocalAddr(l.Addr()) {
		t.Errorf("Listen on loopback gave %v, not local", l.Addr())
	}
}

// rawRequest sends request line target (byte for byte, as no client library would send it) with method and
// returns the status code and body.
func rawRequest(t *testing.T, url, method, target string, header ...string) (int, []byte) {
	code, body, _ := rawRequestLoc(t, url, method, target, header...)
	return code, body
}

// rawRequestLoc is rawRequest that also returns the Location header.
func rawRequestLoc(t *testing.T, url, method, target string, header ...string) (int, []byte, string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: potato\r\nConnection: close\r\n", method, target)
	for _, h := range header {
		fmt.Fprintf(c, "%s\r\n", h)
	}
	fmt.Fprintf(c, "\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %q: %v", method, target, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body, resp.Header.Get("Location")
}

// No request reaches a file outside the spill directory's job directories: job ids and table names with
// "..", encoded dots and slashes, absolute paths, NUL bytes, back slashes and odd lengths are refused with
// a 4xx by every endpoint that takes them, and nothing outside is read or removed. A victim job laid out
// exactly like a spilled one sits next to the spill directory and behind a symlink inside it.
func TestNoPathFromARequestToAFile(t *testing.T) {
	root := t.TempDir()
	spill := filepath.Join(root, "spill")
	os.Mkdir(spill, 0o700)
	ts := startServerNoCleanup(t, Config{SpillDir: spill}, testHooks{})
	real := ts.waitState(t, ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{1, 2, 3}}}}).ID, api.StateDone).ID
	ts.Shutdown(context.Background())

	// The victim: a copy of the real job's directory under another id, outside the spill directory, and
	// a symlink to it inside the spill directory under that id.
	const victimID = "0123456789abcdef"
	victim := filepath.Join(root, "outside", victimID)
	os.MkdirAll(victim, 0o700)
	entries, _ := os.ReadDir(filepath.Join(spill, real))
	for _, e := range entries {
		data, _ := os.ReadFile(filepath.Join(spill, real, e.Name()))
		data = bytes.ReplaceAll(data, []byte(real), []byte(victimID))
		os.WriteFile(filepath.Join(victim, e.Name()), data, 0o600)
	}
	if err := os.Symlink(victim, filepath.Join(spill, victimID)); err != nil {
		t.Fatal(err)
	}
	snapshot := func() map[string]string {
		m := map[string]string{}
		filepath.Walk(filepath.Join(root, "outside"), func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				data, _ := os.ReadFile(p)
				m[p] = string(data)
			}
			return nil
		})
		return m
	}
	before := snapshot()

	ts = startServer(t, Config{SpillDir: spill}, testHooks{})
	ids := []string{
		victimID, "../outside/" + victimID, "..%2foutside%2f" + victimID, "%2e%2e%2foutside%2f" + victimID,
		"%2E%2E", "..", ".", "%2e", "/etc/passwd", "%2fetc%2fpasswd", "..%5c..%5coutside", `..\outside`,
		"%00", real + "%00", real + "%00.json", "0123456789ABCDEF", real[:15], real + "0", strings.Repeat("a", 4096),
		"%c0%ae%c0%ae", "%252e%252e", real + "%2f..%2f..%2foutside%2f" + victimID,
	}
	tableNames := []string{"../job.json", "..%2fjob.json", "%2e%2e%2fjob.json", "job.json", "tokens%00", "tokens%2f..",
		"/etc/passwd", "%2fetc%2fpasswd", "TOKENS", "tokens.parquet", "..", "%2e%2e"}
	refused := 0
	redirected := 0
	check := func(method, target string) {
		t.Helper()
		code, body, loc := rawRequestLoc(t, ts.url, method, target)
		if code == http.StatusTemporaryRedirect || code == http.StatusMovedPermanently {
			// net/http's mux answers a path with dot segments or doubled slashes with a redirect to the
			// cleaned path on this server; what that path answers is what counts.
			if !strings.HasPrefix(loc, "/") || strings.Contains(loc, "..") {
				t.Errorf("%s %s: redirect to %q", method, target, loc)
				return
			}
			redirected++
			target = loc
			code, body = rawRequest(t, ts.url, method, target)
		}
		refused++
		ownJob := strings.HasPrefix(target, api.JobPath(real)+"/") || target == api.JobPath(real) || target == api.PathJobs
		if (code < 400 || code > 499) && !(ownJob && code < 300) {
			t.Errorf("%s %s: %d %.80q, want a 4xx", method, target, code, body)
		}
		if bytes.Contains(body, []byte("PAR1")) || bytes.Contains(body, []byte("ARROW1")) || bytes.Contains(body, []byte(victimID+`",`)) {
			t.Errorf("%s %s: the answer carries file contents: %.120q", method, target, body)
		}
	}
	for _, id := range ids {
		base := api.PathJobs + "/" + id
		check("GET", base)
		check("GET", base+"/progress")
		check("POST", base+"/cancel")
		check("DELETE", base)
		check("GET", base+"/tables/tokens")
	}
	for _, name := range tableNames {
		check("GET", api.PathJobs+"/"+real+"/tables/"+name)
	}
	for _, target := range []string{"/v1/jobs/../../outside", "/../outside/" + victimID + "/job.json", "//etc/passwd",
		"/v1/info/../../" + victimID, "http://potato/../../etc/passwd"} {
		check("GET", target)
	}
	if after := snapshot(); len(after) != len(before) {
		t.Errorf("files outside the spill directory changed: %d before, %d after", len(before), len(after))
	} else {
		for p, data := range before {
			if after[p] != data {
				t.Errorf("%s changed", p)
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(spill, victimID)); err != nil {
		t.Errorf("the symlink was removed: %v", err)
	}
	if st := ts.status(t, real); st.State != api.StateDone {
		t.Errorf("the real job after the attempts: %s", st.State)
	}
	ts.table(t, real, "tokens")
	t.Logf("%d hostile requests refused (%d after net/http's redirect to the cleaned path)", refused, redirected)
}

// With a token, every endpoint (the known ones, unknown ones, and a DELETE) answers 401 without it and
// does nothing: no job is queued, cancelled or removed.
func TestTokenGuardsEveryEndpoint(t *testing.T) {
	const token = "0123456789abcdef-guard"
	ts := startServer(t, Config{Token: token}, testHooks{})
	id := ts.waitState(t, ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{1, 2}}}}).ID, api.StateDone).ID
	for _, tt := range []struct{ method, path string }{
		{"GET", api.PathHealth}, {"GET", api.PathInfo}, {"GET", api.PathJobs}, {"POST", api.PathJobs},
		{"GET", api.JobPath(id)}, {"GET", api.ProgressPath(id)}, {"GET", api.TablePath(id, "tokens")},
		{"POST", api.CancelPath(id)}, {"DELETE", api.JobPath(id)}, {"GET", "/v1/nothing"}, {"PUT", api.PathJobs},
	} {
		for _, h := range []string{"", "Authorization: Bearer", "Authorization: Bearer " + token + "x", "Authorization: bearer " + token,
			"Authorization: Basic " + token, "Authorization:  Bearer " + token[:len(token)-1]} {
			var hs []string
			if h != "" {
				hs = append(hs, h)
			}
			if tt.method == "POST" {
				hs = append(hs, "Content-Length: 0")
			}
			if code, body := rawRequest(t, ts.url, tt.method, tt.path, hs...); code != http.StatusUnauthorized {
				t.Errorf("%s %s with %q: %d %s, want 401", tt.method, tt.path, h, code, body)
			}
		}
	}
	st := ts.status(t, id)
	if st.State != api.StateDone || len(st.Fetched) != 0 || len(ts.jobs) != 1 {
		t.Errorf("after the refused requests: %s, fetched %v, %d jobs", st.State, st.Fetched, len(ts.jobs))
	}
}

// The body limit holds for a body of unknown length (chunked) as for one that declares its length, and
// the server reads no more of it than the limit.
func TestBodyLimitWithoutContentLength(t *testing.T) {
	ts := startServer(t, Config{Limits: api.Limits{MaxBodyBytes: 1024}}, testHooks{})
	pr, pw := io.Pipe()
	sent := make(chan int64, 1)
	go func() {
		var n int64
		chunk := bytes.Repeat([]byte(" "), 4096)
		w, _ := pw.Write([]byte(`{"inputs": [{"text": "`))
		n += int64(w)
		for n < 64<<20 { // far more than the limit: the server must stop reading long before
			w, err := pw.Write(chunk)
			n += int64(w)
			if err != nil {
				break
			}
		}
		pw.Close()
		sent <- n
	}()
	req, _ := http.NewRequest("POST", ts.url+api.PathJobs, pr)
	req.ContentLength = -1 // chunked
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	pr.CloseWithError(io.ErrClosedPipe)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "--max-body-bytes") {
		t.Errorf("chunked body past the limit: %d %s", resp.StatusCode, body)
	}
	if n := <-sent; n >= 64<<20 {
		t.Errorf("the server read the whole %d-byte body", n)
	}
	if len(ts.jobs) != 0 {
		t.Errorf("%d jobs queued", len(ts.jobs))
	}
}
