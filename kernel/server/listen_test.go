package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// fakeListener reports a routable address without binding one.
type fakeListener struct{ net.Listener }

func (fakeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 7878} }

// A server reachable from other machines needs a token; on loopback or a socket it does not.
func TestServeRefusesNonLoopbackWithoutToken(t *testing.T) {
	ts := startServer(t, Config{}, testHooks{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	err = ts.Serve(fakeListener{l})
	if err == nil || !strings.Contains(err.Error(), "10.1.2.3:7878 is reachable from other machines: give a bearer token") {
		t.Fatalf("Serve on 10.1.2.3 without a token: %v", err)
	}
	for _, tt := range []struct {
		addr net.Addr
		want bool
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, true},
		{&net.TCPAddr{IP: net.IPv6loopback}, true},
		{&net.UnixAddr{Name: "/tmp/x.sock", Net: "unix"}, true},
		{&net.TCPAddr{IP: net.IPv4zero}, false},
		{&net.TCPAddr{IP: net.IPv6zero}, false},
		{&net.TCPAddr{IP: net.IPv4(192, 168, 1, 2)}, false},
	} {
		if got := LocalAddr(tt.addr); got != tt.want {
			t.Errorf("LocalAddr(%v) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

// With a token, a request without it or with a wrong one is a 401; with it, it goes through. A server
// with a token may listen anywhere.
func TestToken(t *testing.T) {
	const token = "0123456789abcdef-secret"
	ts := startServer(t, Config{Token: token}, testHooks{})
	for _, tt := range []struct {
		name, header string
		want         int
	}{
		{"none", "", http.StatusUnauthorized},
		{"wrong", "Bearer 0123456789abcdef-secreT", http.StatusUnauthorized},
		{"prefix", "Bearer 0123456789abcdef", http.StatusUnauthorized},
		{"not bearer", "Basic " + token, http.StatusUnauthorized},
		{"right", "Bearer " + token, http.StatusOK},
	} {
		req, _ := http.NewRequest("GET", ts.url+api.PathInfo, nil)
		if tt.header != "" {
			req.Header.Set("Authorization", tt.header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e api.Error
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: %d %q, want %d", tt.name, resp.StatusCode, e.Error, tt.want)
		}
		if tt.want == http.StatusUnauthorized && (!strings.Contains(e.Error, "bearer token") || resp.Header.Get("WWW-Authenticate") == "") {
			t.Errorf("%s: 401 without explanation: %q", tt.name, e.Error)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go ts.Serve(fakeListener{l}) // accepted: the server has a token
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("the token server did not serve the routable listener: %v", err)
	}
	c.Close()
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct{ content, want string }{
		{"  0123456789abcdef\n", ""},
		{"short\n", "the token has 5 characters, want at least 16"},
		{"0123456789 abcdef", "white space"},
	} {
		path := filepath.Join(dir, "token")
		os.WriteFile(path, []byte(tt.content), 0o600)
		tok, err := ReadToken(path)
		switch {
		case tt.want == "" && (err != nil || tok != "0123456789abcdef"):
			t.Errorf("%q: %q, %v", tt.content, tok, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%q: %v, want …%s…", tt.content, err, tt.want)
		}
	}
	// "-" reads it from stdin, as every file flag of potato takes "-".
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() { w.WriteString("0123456789abcdef\n"); w.Close() }()
	old := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = old; r.Close() }()
	if tok, err := ReadToken("-"); err != nil || tok != "0123456789abcdef" {
		t.Errorf("ReadToken(-): %q, %v", tok, err)
	}
}

// The API over a unix socket, private to its owner; a dead server's socket file is replaced.
func TestUnixSocket(t *testing.T) {
	ts := startServer(t, Config{}, testHooks{})
	dir, err := os.MkdirTemp("", "sock") // short: socket paths are limited to about 100 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "s.sock")
	stale, _ := net.Listen("unix", path)
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close() // leaves the socket file, as a killed server does
	l, err := Listen("unix:" + path)
	if err != nil {
		t.Fatal(err)
	}
	if AddrString(l.Addr()) != "unix:"+path {
		t.Errorf("AddrString: %s", AddrString(l.Addr()))
	}
	go ts.Serve(l)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode: %v %v", fi.Mode(), err)
	}
	if _, err := Listen("unix:" + path); err == nil || !strings.Contains(err.Error(), "already answers") {
		t.Errorf("second Listen on a live socket: %v", err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
	us := &testServer{Server: ts.Server, url: "http://potato", hc: hc}
	id := us.submit(t, api.Request{Inputs: []api.Input{api.TextInput("over a socket")}}).ID
	us.waitState(t, id, api.StateDone)
	if tab := us.table(t, id, "tokens"); tab.NumRows() == 0 {
		t.Error("no rows over the socket")
	}
}
