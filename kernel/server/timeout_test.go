package server

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/potato-k3/potato-k3/kernel/api"
)

// A job body that trickles in at a byte every 100 ms is answered 408 once --read-timeout (here 400 ms)
// has passed, and the connection is closed: before, it stayed open as long as the client kept sending.
func TestSlowBodyTimesOut(t *testing.T) {
	ts := startServer(t, Config{ReadTimeout: 400 * time.Millisecond}, testHooks{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"inputs": [{"tokens": [1, 2, 3]}]}`
	if _, err := conn.Write([]byte("POST " + api.PathJobs + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + itoa(len(body)) + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for i := 0; i < len(body); i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				return
			}
		}
	}()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no response to a trickling body after %v: %v", time.Since(start), err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || time.Since(start) > 3*time.Second {
		t.Errorf("-want 408 within about 400ms +got %d after %v", resp.StatusCode, time.Since(start))
	}
}

// CheckListen refuses before anything listens; it accepts loopback, sockets and any address with a token.
func TestCheckListen(t *testing.T) {
	for _, tt := range []struct {
		addr, token, want string
	}{
		{"127.0.0.1:0", "", ""},
		{"localhost:7878", "", ""},
		{"[::1]:0", "", ""},
		{"unix:/tmp/x.sock", "", ""},
		{"0.0.0.0:7878", "", "0.0.0.0:7878 is reachable from other machines: give a bearer token (--token-file)"},
		{":7878", "", "is reachable from other machines"},
		{"0.0.0.0:7878", "0123456789abcdef", ""},
		{"unix:", "", "no socket path"},
		{"nohost:notaport", "", `--listen "nohost:notaport"`},
	} {
		err := CheckListen(tt.addr, tt.token)
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("CheckListen(%q, %q): -want …%s… +got %v", tt.addr, tt.token, tt.want, err)
		}
	}
}

func itoa(n int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		if n /= 10; n == 0 {
			return string(b)
		}
	}
}

// The tokens table names each row's conversation (its id, else the input's index) and thinking mode, and
// is "" for both on text and token ids.
func TestConversationColumns(t *testing.T) {
	ts := startServer(t, Config{}, testHooks{})
	req := api.Request{Inputs: []api.Input{
		{Conversation: []byte(`{"id": "a", "messages": [{"role": "user", "content": "Hi"}], "thinking": true}`)},
		{Conversation: []byte(`{"messages": [{"role": "user", "content": "Yo"}]}`)},
		api.TextInput("plain"),
	}, Thinking: ptr(true)}
	id := ts.waitState(t, ts.submit(t, req).ID, api.StateDone).ID
	tab := ts.table(t, id, "tokens")
	want := map[int32][2]string{0: {"a", "on"}, 1: {"1", "on"}, 2: {"", ""}}
	for _, rec := range tab.Records {
		seq := rec.Column(rec.Schema().FieldIndices("seq_id")[0]).(*array.Int32)
		conv := rec.Column(rec.Schema().FieldIndices("conversation")[0]).(*array.String)
		thinking := rec.Column(rec.Schema().FieldIndices("thinking")[0]).(*array.String)
		for i := range int(rec.NumRows()) {
			if w := want[seq.Value(i)]; conv.Value(i) != w[0] || thinking.Value(i) != w[1] {
				t.Fatalf("seq %d row %d: conversation %q thinking %q, want %q %q", seq.Value(i), i, conv.Value(i), thinking.Value(i), w[0], w[1])
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }
