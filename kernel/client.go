package kernel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// Client talks to one resident engine. It is safe for concurrent use; Close frees its idle connections
// and leaves the engine running.
type Client struct {
	addr     string // as given: "unix:/path" or "http://host:port"
	base     string // URL prefix of every request
	token    string
	hc       *http.Client
	progress io.Writer // text progress outside a notebook; nil: none
	logPath  string    // the engine's log, when this package started it (for error messages); else ""
	// cacheWarned: ReplayCached has said once that it could not store a result (cache.go)
	cacheWarned sync.Once
	// flights: the ReplayCached calls under way, by results entry, so that one submits (flight.go)
	flights flights
}

// ServerError is an error answer of the engine: its HTTP status and the server's own message, which
// names the input, option or limit at fault. StatusCode is 400 for a malformed or invalid request, 404
// for an unknown job or table, 409 for a job in the wrong state (a cancel of a finished job), 413 for a
// request past a limit (Limit names its flag), 401 for a missing or wrong token, 5xx for the engine's
// own failures. Callers test for it with errors.As.
type ServerError struct {
	StatusCode int
	Message    string
	Limit      string // the server flag of the limit a refused request passed, if that is why
}

// Error is "kernel: engine answered STATUS: MESSAGE".
func (e *ServerError) Error() string {
	return fmt.Sprintf("kernel: engine answered %d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// newClient makes a client of addr: "unix:/path", "http://host:port", or a bare "host:port".
func newClient(addr, token string, progress io.Writer) (*Client, error) {
	c := &Client{addr: addr, token: token, progress: progress}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	switch {
	case strings.HasPrefix(addr, "unix:"):
		path := strings.TrimPrefix(addr, "unix:")
		if path == "" {
			return nil, fmt.Errorf("kernel: address %q: no socket path", addr)
		}
		tr.Proxy = nil
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		c.base = "http://potato" // the host is not used: every connection goes to the socket
	case strings.HasPrefix(addr, "http://"), strings.HasPrefix(addr, "https://"):
		c.base = strings.TrimSuffix(addr, "/")
	case strings.Contains(addr, "://"): // else it would be dialled as the host "ftp" of http://ftp://x
		return nil, fmt.Errorf("kernel: address %q: the engine speaks http, https or unix: give http://host:port, https://host:port or unix:/path", addr)
	case addr != "":
		c.base = "http://" + addr
	default:
		return nil, fmt.Errorf("kernel: empty address")
	}
	c.hc = &http.Client{Transport: tr}
	return c, nil
}

// Addr is the engine's address as the client dials it.
func (c *Client) Addr() string { return c.addr }

// Close frees the client's idle connections. The engine keeps running (see Shutdown). It always returns
// nil; the client still works after it, opening new connections.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

// request sends method path with body (JSON-encoded when not nil) and returns the response when its
// status is 2xx; any other answer becomes a *ServerError.
func (c *Client) request(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("kernel: encoding the request: %w", err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", api.ContentTypeJSON)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kernel: %s %s: %w", method, c.addr, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e api.Error
	if json.Unmarshal(data, &e) != nil || e.Error == "" {
		// Not the engine's JSON: a proxy's or web server's page, of which the start is enough.
		e.Error = clip(string(data), 300)
	}
	return nil, &ServerError{StatusCode: resp.StatusCode, Message: e.Error, Limit: e.Limit}
}

// getJSON decodes the JSON answer of method path into out.
func (c *Client) getJSON(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.request(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("kernel: %s %s: reading the answer: %w", method, path, err)
	}
	return nil
}

// Health asks the engine whether it is up; it answers at once or fails: an error when the engine does
// not answer before ctx ends, a *ServerError when something answers with an error status (a wrong
// token: 401).
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	var h api.Health
	err := c.getJSON(ctx, http.MethodGet, api.PathHealth, nil, &h)
	return h, err
}

// Info describes the engine's model (layers, vocabulary, layer kinds, config hash) and its limits. It
// fails only when the engine does not answer (or refuses the token: a *ServerError of status 401).
func (c *Client) Info(ctx context.Context) (api.Info, error) {
	var info api.Info
	err := c.getJSON(ctx, http.MethodGet, api.PathInfo, nil, &info)
	return info, err
}

// Status is a job's status. It is an error when id is empty, and a *ServerError of status 404 when the
// engine does not know the job (never submitted, forgotten, or past its keep period).
func (c *Client) Status(ctx context.Context, id string) (api.JobStatus, error) {
	var st api.JobStatus
	if err := checkID(id); err != nil {
		return st, err
	}
	err := c.getJSON(ctx, http.MethodGet, api.JobPath(id), nil, &st)
	return st, err
}

// Jobs lists every job the engine knows, oldest first. It fails only when the engine does not answer.
func (c *Client) Jobs(ctx context.Context) ([]api.JobStatus, error) {
	var list []api.JobStatus
	err := c.getJSON(ctx, http.MethodGet, api.PathJobs, nil, &list)
	return list, err
}

// Cancel cancels a queued or running job and returns its status. It is the only way to cancel one: a
// cell that is interrupted, or a client that drops, leaves its job running and its results kept. It is
// an error when id is empty, a *ServerError of status 404 when the engine does not know the job, and
// one of status 409 when the job is already done, failed or cancelled.
func (c *Client) Cancel(ctx context.Context, id string) (api.JobStatus, error) {
	var st api.JobStatus
	if err := checkID(id); err != nil {
		return st, err
	}
	err := c.getJSON(ctx, http.MethodPost, api.CancelPath(id), nil, &st)
	return st, err
}

// Forget cancels a job if it is unfinished and deletes it and its results on the engine now, rather
// than when its keep period ends. It is an error when id is empty, and a *ServerError of status 404
// when the engine does not know the job (a second Forget of one job is that error).
func (c *Client) Forget(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	return c.getJSON(ctx, http.MethodDelete, api.JobPath(id), nil, nil)
}

// checkID refuses an empty job id, which would otherwise reach the engine as the path /v1/jobs/ and come
// back as "no endpoint", naming no job.
func checkID(id string) error {
	if id == "" {
		return fmt.Errorf("kernel: no job id given (Submit returns it as JobStatus.ID; Jobs lists the engine's)")
	}
	return nil
}

// healthTimeout bounds one health check: a live engine answers it at once, even mid-wave. It is a
// variable only so that a test of an engine that does not answer need not wait the full time.
var healthTimeout = 5 * time.Second
