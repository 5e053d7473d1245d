package kernel

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/potato-k3/potato-k3/datasets/examples"
	"github.com/potato-k3/potato-k3/kernel/server"
)

// oneCalls are the package-level one-call forms beside the methods they wrap.
var oneCalls = []struct {
	name    string
	oneCall func(context.Context, ...Arg) (*Result, error)
	method  func(*Client, context.Context, ...Arg) (*Result, error)
	cached  bool
}{
	{"ReplayCached", ReplayCached, (*Client).ReplayCached, true},
	{"Replay", Replay, (*Client).Replay, false},
}

// connCount counts the connections a server accepted, and those still open: the server closes its end
// of a connection when the client closes its own, so open falls to 0 only once every client holding
// one has closed it (the server's idle timeout, 2 minutes, is far off).
type connCount struct{ accepted, open atomic.Int64 }

type countingListener struct {
	net.Listener
	n *connCount
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.n.accepted.Add(1)
	l.n.open.Add(1)
	return &countedConn{Conn: c, n: l.n}, nil
}

type countedConn struct {
	net.Conn
	n    *connCount
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.n.open.Add(-1) })
	return c.Conn.Close()
}

// startCountedServer is startServer on loopback with the server's connections counted.
func startCountedServer(t *testing.T) (string, *connCount) {
	t.Helper()
	s, err := server.New(context.Background(), server.Config{ModelDir: modelDir, SpillDir: t.TempDir(), Gather: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	l, err := server.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &connCount{}
	go s.Serve(countingListener{l, n})
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return server.AddrString(l.Addr()), n
}

// openAfter is the number of open connections once it is want, or after a second of waiting for it
// (the server sees a client's close a moment after it happens).
func (n *connCount) openAfter(want int64) int64 {
	for deadline := time.Now().Add(time.Second); n.open.Load() != want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	return n.open.Load()
}

// settled is the number of open connections once it has not changed for 100ms (at most a second): a
// connection that a client's transport drops after a request (a body closed before its end) is still
// counted for a moment.
func (n *connCount) settled() int64 {
	last := n.open.Load()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		now := n.open.Load()
		if now == last {
			break
		}
		last = now
	}
	return last
}

// The one-call form returns the tables of the two-step form (Connect, then the method), and its
// Release closes the client it opened, once; the two-step form's Release leaves the caller's client
// open, which is what makes the count tell them apart.
func TestOneCallReleaseClosesItsClient(t *testing.T) {
	ctx := context.Background()
	args := []Arg{Example("greeting"), TopK(3), Lens(1)}
	for _, tt := range oneCalls {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvCache, t.TempDir())
			addr, conns := startCountedServer(t)
			t.Setenv(EnvAddr, addr)

			one, err := tt.oneCall(ctx, args...)
			if err != nil {
				t.Fatal(err)
			}
			defer one.Release()
			if one.FromCache || one.owned == nil {
				t.Errorf("one call: FromCache %v, owns a client %v; want a fresh replay that owns its client", one.FromCache, one.owned != nil)
			}
			mine := conns.settled() // the one call's connections
			if mine == 0 {
				t.Fatal("no connection open before Release: the count cannot show that Release closes one")
			}

			c, err := Connect()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			two, err := tt.method(c, ctx, args...)
			if err != nil {
				t.Fatal(err)
			}
			defer two.Release()
			// Cached, the second asker reads the first one's job back; uncached, it replays again.
			if sameJob := two.Status.ID == one.Status.ID; two.FromCache != tt.cached || sameJob != tt.cached {
				t.Errorf("two-step form: FromCache %v, same job %v; want both %v", two.FromCache, sameJob, tt.cached)
			}
			if two.owned != nil {
				t.Error("a result of the method owns a client")
			}
			for _, name := range []string{"tokens", "lens"} {
				a, b := one.Table(name), two.Table(name)
				if a == nil || b == nil || !a.Schema().Equal(b.Schema()) || !array.RecordEqual(a, b) {
					t.Errorf("table %s differs between the one call and the two-step form", name)
				}
			}

			held := conns.settled() // the one call's connections and c's
			t.Logf("open connections: %d of the one call, %d in all", mine, held)
			one.Release()
			if got := conns.openAfter(held - mine); got != held-mine {
				t.Errorf("after Release of the one call's result: %d connections open, want c's %d", got, held-mine)
			}
			one.Release() // twice: nothing more to close, and no panic
			if one.Tokens() != nil || one.owned != nil {
				t.Error("tables or client after Release")
			}
			two.Release()
			if got := conns.settled(); got != held-mine {
				t.Errorf("Release of the two-step form's result changed the open connections from %d to %d: it closed the caller's client", held-mine, got)
			}
			c.Close()
			if got := conns.openAfter(0); got != 0 {
				t.Errorf("%d connections open after every client closed", got)
			}
		})
	}
}

// An error of a one call leaves no client open: args that cannot apply connect nowhere, an engine's
// refusal closes the client that asked, and an engine that does not answer gives no client.
func TestOneCallErrorsCloseTheClient(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name        string
		args        []Arg
		unreachable bool  // POTATO_ADDR names a socket nobody listens on
		is          error // the sentinel the error wraps, if any
		want        string
		connects    bool // the call reaches the engine before it fails
	}{
		{"token outside the vocabulary", []Arg{Tokens(1, 4000)}, false, nil,
			"inputs[0].tokens[1]: token id 4000 outside the vocabulary", true},
		{"layer outside the model", []Arg{Tokens(1, 2), Lens(99)}, false, nil, "options.lens[0]: layer 99 outside 0..7", true},
		{"unknown example", []Arg{Example("no-such")}, false, examples.ErrUnknown, "no-such", false},
		{"nothing to replay", []Arg{TopK(3)}, false, nil, "kernel: nothing to replay", false},
		{"unreachable POTATO_ADDR", []Arg{Example("greeting")}, true, nil, "does not answer", false},
	} {
		for _, f := range oneCalls {
			t.Run(tt.name+"/"+f.name, func(t *testing.T) {
				t.Setenv(EnvCache, t.TempDir())
				addr, conns := startCountedServer(t)
				if tt.unreachable {
					addr = "unix:" + filepath.Join(t.TempDir(), "nobody.sock")
				}
				t.Setenv(EnvAddr, addr)
				r, err := f.oneCall(ctx, tt.args...)
				if r != nil || err == nil || !strings.Contains(err.Error(), tt.want) || (tt.is != nil && !errors.Is(err, tt.is)) {
					t.Fatalf("(-want +got):\n-nil, …%s…\n+%v, %v", tt.want, r, err)
				}
				if got := conns.accepted.Load() > 0; got != tt.connects {
					t.Errorf("reached the engine: %v, want %v", got, tt.connects)
				}
				if got := conns.openAfter(0); got != 0 {
					t.Errorf("%d connections left open after the error", got)
				}
			})
		}
	}
}
