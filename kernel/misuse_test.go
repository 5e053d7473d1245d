package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// A result used after Release, or released twice, or a nil one released (a `defer res.Release()` before
// the error check of a failed Replay), says what happened instead of panicking or reading as empty.
func TestResultAfterRelease(t *testing.T) {
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema([]arrow.Field{{Name: "seq_id", Type: arrow.PrimitiveTypes.Int32}}, nil))
	b.Field(0).(*array.Int32Builder).Append(0)
	rec := b.NewRecordBatch()
	b.Release()
	r := &Result{Status: api.JobStatus{ID: "0123456789abcdef", Sequences: 1, Tokens: 1, Precision: "bf16"},
		tables: map[string]arrow.RecordBatch{"tokens": rec}}
	r.Release()
	r.Release()
	var none *Result
	none.Release()
	for _, tt := range []struct {
		name string
		got  func() string
		want string
	}{
		{"Summary", r.Summary, "job 0123456789abcdef · 1 sequence · 1 token · bf16 · released (its tables are freed: Fetch or replay again)"},
		{"HTML says released", func() string { return boolText(strings.Contains(r.HTML(), "released (its tables are freed")) }, "true"},
		{"Tokens", func() string { return boolText(r.Tokens() == nil && r.Table("tokens") == nil) }, "true"},
		{"MessageLogprob", func() string {
			_, err := r.MessageLogprob(0, 0)
			return errText(err)
		}, "kernel: the result of job 0123456789abcdef was released: its tables are gone (Fetch or replay again)"},
		{"SpanLogprob", func() string {
			_, err := r.SpanLogprob(0, 1, 2)
			return errText(err)
		}, "kernel: the result of job 0123456789abcdef was released: its tables are gone (Fetch or replay again)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.got(); got != tt.want {
				t.Errorf("(-want +got):\n-%s\n+%s", tt.want, got)
			}
		})
	}
}

// Mistakes a cell can make with the client are refused with a message that names them, before anything
// is sent where the client can tell: an empty job id (else the engine's "no endpoint GET /v1/jobs/"),
// Tokens with no ids (else "inputs[0]: give exactly one of text, conversation, tokens (got 0)"), a
// Fetch of a job that is not done yet (else "is queued, not done: " and nothing after it), a Fetch whose
// context ends mid-table (else only the URL named the job).
func TestClientMisuse(t *testing.T) {
	var state atomic.Value // the job's state as the stand-in engine reports it
	state.Store(api.StateQueued)
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/tables/tokens"):
			<-r.Context().Done() // a table that does not arrive before the cell's deadline
		case r.URL.Path == api.JobPath("0123456789abcdef"):
			json.NewEncoder(w).Encode(api.JobStatus{ID: "0123456789abcdef", State: state.Load().(api.JobState), Tables: []string{"tokens"}})
		default:
			w.WriteHeader(http.StatusTeapot) // the client must not have sent this
			t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
		}
	}))
	defer engine.Close()
	c, err := newClient(engine.URL, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	noID := "kernel: no job id given (Submit returns it as JobStatus.ID; Jobs lists the engine's)"
	for _, tt := range []struct {
		name  string
		state api.JobState
		call  func(ctx context.Context) error
		want  string
	}{
		{"Status without id", "", func(ctx context.Context) error { _, err := c.Status(ctx, ""); return err }, noID},
		{"Wait without id", "", func(ctx context.Context) error { _, err := c.Wait(ctx, ""); return err }, noID},
		{"Fetch without id", "", func(ctx context.Context) error { _, err := c.Fetch(ctx, ""); return err }, noID},
		{"Cancel without id", "", func(ctx context.Context) error { _, err := c.Cancel(ctx, ""); return err }, noID},
		{"Forget without id", "", func(ctx context.Context) error { return c.Forget(ctx, "") }, noID},
		{"Tokens without ids", "", func(ctx context.Context) error { _, err := c.Submit(ctx, Tokens()); return err },
			"kernel: Tokens: no token ids: a sequence needs at least one"},
		{"Label past the limit", "", func(ctx context.Context) error {
			_, err := c.Submit(ctx, Text("x"), Label(strings.Repeat("x", api.MaxLabelBytes+1)))
			return err
		}, "kernel: Label: 257 bytes: the engine's limit is 256 bytes (api.MaxLabelBytes); a label is a short name for the job"},
		{"Fetch of a queued job", api.StateQueued, func(ctx context.Context) error { _, err := c.Fetch(ctx, "0123456789abcdef"); return err },
			`kernel: job 0123456789abcdef is queued, not done yet: Wait(ctx, "0123456789abcdef") for it, then Fetch`},
		{"Fetch of a running job", api.StateRunning, func(ctx context.Context) error { _, err := c.Fetch(ctx, "0123456789abcdef"); return err },
			`kernel: job 0123456789abcdef is running, not done yet: Wait(ctx, "0123456789abcdef") for it, then Fetch`},
		{"Fetch cut by its context", api.StateDone, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			_, err := c.Fetch(ctx, "0123456789abcdef")
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error %v does not wrap the context's", err)
			}
			return err
		}, `kernel: job 0123456789abcdef is done and its results stay on the engine (fetch them later with Fetch(ctx, "0123456789abcdef")): table tokens: `},
	} {
		t.Run(tt.name, func(t *testing.T) {
			state.Store(tt.state)
			got := errText(tt.call(ctx))
			if !strings.HasPrefix(got, tt.want) {
				t.Errorf("(-want +got):\n-%s\n+%s", tt.want, got)
			}
		})
	}
}

// Label refuses, before sending, what the engine would refuse: more than api.MaxLabelBytes bytes.
func TestLabelArg(t *testing.T) {
	for _, tt := range []struct {
		name, label, want string // want: the error, "<nil>" when the label is sent as given
	}{
		{"empty", "", "<nil>"},
		{"at the limit", strings.Repeat("x", api.MaxLabelBytes), "<nil>"},
		{"at the limit in two-byte runes", strings.Repeat("é", api.MaxLabelBytes/2), "<nil>"},
		{"one byte over", strings.Repeat("x", api.MaxLabelBytes+1),
			"kernel: Label: 257 bytes: the engine's limit is 256 bytes (api.MaxLabelBytes); a label is a short name for the job"},
		{"100 kB", strings.Repeat("x", 100_000), "kernel: Label: 100000 bytes: the engine's limit is 256 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, err := buildRequest([]Arg{Text("x"), Label(tt.label)})
			if got := errText(err); !strings.HasPrefix(got, tt.want) {
				t.Fatalf("(-want +got):\n-%s\n+%s", tt.want, got)
			}
			if err == nil && req.Label != tt.label {
				t.Errorf("label sent as %q, want %q", req.Label, tt.label)
			}
		})
	}
}

func boolText(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// A submission whose answer is lost after it may have reached the engine says that the job may be
// queued and how to find it among Jobs (the engine picks the id, so there is none to give); one the
// engine refused, or that never left, says nothing of the kind.
func TestSubmitAnswerLost(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the request arrived whole: the engine would queue it now
		switch r.Header.Get("X-Test") {
		case "withheld":
			<-r.Context().Done() // the answer comes after the cell's deadline
		case "broken":
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		case "garbled":
			w.WriteHeader(http.StatusAccepted)
			w.Write([]byte("{\"id\": "))
		case "refused":
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(api.Error{Error: "options.top_k -1 is negative"})
		}
	}))
	defer engine.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // nothing listens at its address
	const lost = "the engine may have queued the job all the same; Jobs(ctx) lists its jobs, oldest first: look for one created at "
	for _, tt := range []struct {
		name, mode, addr string
		ctx              func() (context.Context, context.CancelFunc)
		args             []Arg
		want             []string // in the error
		notWant          string
	}{
		{"answer withheld past the deadline", "withheld", engine.URL,
			func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 200*time.Millisecond)
			},
			[]Arg{Text("x"), Label("pilot")},
			[]string{"kernel: no answer to the submission (", "context deadline exceeded", lost,
				` or a little later, with 1 sequence and the label "pilot", then Wait for it or Cancel it rather than submit it twice`}, ""},
		{"connection broken", "broken", engine.URL, nil, []Arg{Texts("x", "y")},
			[]string{"kernel: no answer to the submission (", lost, " or a little later, with 2 sequences (a Label would name it), then Wait"}, ""},
		{"answer garbled", "garbled", engine.URL, nil, []Arg{Text("x")},
			[]string{"reading the answer", lost}, ""},
		{"refused by the engine", "refused", engine.URL, nil, []Arg{Text("x")},
			[]string{"kernel: engine answered 400 Bad Request: options.top_k -1 is negative"}, "may have queued"},
		{"nothing listens", "", gone.URL, nil, []Arg{Text("x")},
			[]string{"connection refused"}, "may have queued"},
		{"context ended before sending", "", engine.URL,
			func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx, cancel
			}, []Arg{Text("x")},
			[]string{"kernel: not submitted: context canceled"}, "may have queued"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := newClient(tt.addr, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.hc.Transport = headerTransport{c.hc.Transport, tt.mode}
			ctx, cancel := context.WithCancel(context.Background())
			if tt.ctx != nil {
				ctx, cancel = tt.ctx()
			}
			defer cancel()
			_, err = c.Submit(ctx, tt.args...)
			got := errText(err)
			for _, want := range tt.want {
				if !strings.Contains(got, want) {
					t.Errorf("(-want +got):\n-…%s…\n+%s", want, got)
				}
			}
			if tt.notWant != "" && strings.Contains(got, tt.notWant) {
				t.Errorf("error %q says %q", got, tt.notWant)
			}
		})
	}
}

// headerTransport tells the stand-in engine how to answer.
type headerTransport struct {
	http.RoundTripper
	mode string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Test", h.mode)
	return h.RoundTripper.RoundTrip(r)
}
