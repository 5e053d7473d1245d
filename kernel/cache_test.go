package kernel

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/potato-k3/potato-k3/datasets/examples"
	"github.com/potato-k3/potato-k3/kernel/server"
)

// ReplayCached replays once per distinct request: the second identical call reads the stored tables,
// equal to the first's, and a different request replays again.
func TestReplayCached(t *testing.T) {
	t.Setenv(EnvCache, t.TempDir())
	c, err := Connect(WithAddr(startServer(t, "127.0.0.1:0", server.Config{})))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	first, err := c.ReplayCached(ctx, Example("greeting"), TopK(3), Lens(1))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release()
	if first.FromCache {
		t.Error("the first call came from the cache")
	}
	second, err := c.ReplayCached(ctx, Example("greeting"), TopK(3), Lens(1))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release()
	if !second.FromCache || second.Status.ID != first.Status.ID {
		t.Errorf("second call: FromCache %v, job %s; want the first job %s from the cache", second.FromCache, second.Status.ID, first.Status.ID)
	}
	for _, name := range []string{"tokens", "lens"} {
		a, b := first.Table(name), second.Table(name)
		if a == nil || b == nil || !array.RecordEqual(a, b) || !a.Schema().Equal(b.Schema()) {
			t.Errorf("table %s differs between the replay and the cached copy", name)
		}
	}
	other, err := c.ReplayCached(ctx, Example("greeting"), TopK(4))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	if other.FromCache {
		t.Error("a different request came from the cache")
	}
	// A damaged entry replays again.
	dir, _ := stateDir()
	entries, _ := filepath.Glob(filepath.Join(dir, resultsDir, "*", "tokens.arrows"))
	for _, e := range entries {
		os.WriteFile(e, []byte("not arrow"), 0o600)
	}
	again, err := c.ReplayCached(ctx, Example("greeting"), TopK(3), Lens(1))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Release()
	if again.FromCache {
		t.Error("a damaged entry was read")
	}
}

// Example replays bundled conversations by id and names the ids there are when one is unknown.
func TestExample(t *testing.T) {
	req, err := buildRequest([]Arg{Example("greeting", "why-sky-blue")})
	if err != nil || len(req.Inputs) != 2 {
		t.Fatalf("Example: %d inputs, %v", len(req.Inputs), err)
	}
	conv, _ := examples.Get("greeting")
	want, _ := buildRequest([]Arg{Chat(conv)})
	if string(req.Inputs[0].Conversation) != string(want.Inputs[0].Conversation) {
		t.Errorf("Example(greeting) sends %s, Chat of the same conversation %s", req.Inputs[0].Conversation, want.Inputs[0].Conversation)
	}
	if _, err := buildRequest([]Arg{Example("no-such")}); !errors.Is(err, examples.ErrUnknown) {
		t.Errorf("unknown id: %v", err)
	}
}

// unwritableCache points the cache at a new directory where no results entry can be made, whoever runs
// the test (the results folder is a file), and returns what ReplayCached warns until the test ends.
func unwritableCache(t *testing.T) *strings.Builder {
	t.Helper()
	root := t.TempDir()
	t.Setenv(EnvCache, root)
	if err := os.MkdirAll(filepath.Join(root, "kernel"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "kernel", resultsDir), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	warned := &strings.Builder{}
	cacheWarnings = warned
	t.Cleanup(func() { cacheWarnings = os.Stderr })
	return warned
}

// A cache that cannot be written leaves ReplayCached's results intact and says so once a client, not on
// every call.
func TestReplayCachedUnwritable(t *testing.T) {
	warned := unwritableCache(t)
	c, err := Connect(WithAddr(startServer(t, "127.0.0.1:0", server.Config{})))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 2 {
		r, err := c.ReplayCached(context.Background(), Example("greeting"), TopK(2))
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if r.FromCache || r.Tokens().NumRows() == 0 {
			t.Fatalf("call %d: from cache %v, %d token rows: want a fresh replay with rows", i, r.FromCache, r.Tokens().NumRows())
		}
	}
	if n := strings.Count(warned.String(), "could not store a result"); n != 1 {
		t.Errorf("warned %d times, want once: %q", n, warned.String())
	}
}

// A ReplayCached whose context ends while its job runs leaves the job on the engine, and the same call
// again waits for that job and fetches it instead of submitting a second (before, each retry after a
// timeout replayed the request once more). A pending job the engine no longer has, one cancelled, one of
// another request, or a damaged record, is submitted anew.
func TestReplayCachedResumes(t *testing.T) {
	args := []Arg{Example("greeting"), TopK(2), Label("resume")}
	for _, tt := range []struct {
		name    string
		between func(t *testing.T, c *Client, record, first string) // after the interrupted call
		resumes bool                                                // the second call fetches the first job
	}{
		{"job still queued", func(*testing.T, *Client, string, string) {}, true},
		{"job done meanwhile", func(t *testing.T, c *Client, _, first string) {
			if _, err := c.Wait(context.Background(), first); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"job forgotten", func(t *testing.T, c *Client, _, first string) {
			if err := c.Forget(context.Background(), first); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"job cancelled", func(t *testing.T, c *Client, _, first string) {
			if _, err := c.Cancel(context.Background(), first); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"record of another request's job", func(t *testing.T, c *Client, record, _ string) {
			other, err := c.Submit(context.Background(), Example("greeting"), TopK(3), Label("resume"))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(record, []byte(`{"job": "`+other.ID+`"}`), 0o600)
		}, false},
		{"damaged record", func(t *testing.T, c *Client, record, _ string) {
			os.WriteFile(record, []byte(`{"job": `), 0o600)
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvCache, t.TempDir())
			// Jobs wait a second to gather: the first call's context ends while its job is queued (with time
			// to spare for Info and the submission on a busy machine).
			c, err := Connect(WithAddr(startServer(t, "127.0.0.1:0", server.Config{Gather: time.Second})))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
			_, err = c.ReplayCached(ctx, args...)
			cancel()
			if want := "; ReplayCached with the same request waits for this job rather than submit it again"; err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("interrupted call: %v\nwant …%s…", err, want)
			}
			jobs, err := c.Jobs(context.Background())
			if err != nil || len(jobs) != 1 {
				t.Fatalf("after the interrupted call the engine has %d jobs (%v), want 1", len(jobs), err)
			}
			first := jobs[0].ID
			dir, _ := stateDir()
			records, _ := filepath.Glob(filepath.Join(dir, resultsDir, "*", pendingName))
			if len(records) != 1 {
				t.Fatalf("%d pending records, want 1", len(records))
			}
			tt.between(t, c, records[0], first)

			r, err := c.ReplayCached(context.Background(), args...)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Release()
			if got := r.Status.ID == first; got != tt.resumes || r.FromCache || r.Tokens().NumRows() == 0 {
				t.Errorf("second call: job %s (the first: %s), from cache %v, %d rows; want the first job %v, a fetch with rows",
					r.Status.ID, first, r.FromCache, r.Tokens().NumRows(), tt.resumes)
			}
			if _, err := os.Stat(records[0]); !os.IsNotExist(err) {
				t.Errorf("pending record after the result was stored: %v", err)
			}
			again, err := c.ReplayCached(context.Background(), args...)
			if err != nil {
				t.Fatal(err)
			}
			defer again.Release()
			if !again.FromCache || again.Status.ID != r.Status.ID {
				t.Errorf("third call: from cache %v, job %s; want job %s from the cache", again.FromCache, again.Status.ID, r.Status.ID)
			}
			if tt.resumes {
				if jobs, _ := c.Jobs(context.Background()); len(jobs) != 1 {
					t.Errorf("the engine has %d jobs, want the one submitted once", len(jobs))
				}
			}
		})
	}
}
