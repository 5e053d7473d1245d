package kernel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"
)

// Environment variables Connect reads.
const (
	EnvAddr  = "POTATO_ADDR"  // the engine to use: http://host:port or unix:/path
	EnvToken = "POTATO_TOKEN" // its bearer token, when it has one
	EnvBin   = "POTATO_BIN"   // the potato binary that starts a background engine
	EnvCache = "POTATO_CACHE" // the cache directory (default: the user's cache directory/potato-k3)
)

// Option configures Connect.
type Option func(*options)

type options struct {
	addr, token, model string
	noStart            bool
	startTimeout       time.Duration
	progress           io.Writer
}

// WithAddr connects to the engine at addr (http://host:port or unix:/path) instead of $POTATO_ADDR or a
// background engine.
func WithAddr(addr string) Option { return func(o *options) { o.addr = addr } }

// WithToken sends token as the bearer token instead of $POTATO_TOKEN.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithModel starts the background engine on the model directory dir instead of the embedded default.
// A background engine already running on another model is an error (stop it with Shutdown).
func WithModel(dir string) Option { return func(o *options) { o.model = dir } }

// WithoutStart makes Connect fail rather than start a background engine.
func WithoutStart() Option { return func(o *options) { o.noStart = true } }

// WithStartTimeout bounds how long Connect waits for a background engine it started to answer (default
// 3 minutes: the first start may compile potato with go run, and writes the default model).
func WithStartTimeout(d time.Duration) Option { return func(o *options) { o.startTimeout = d } }

// WithProgress writes a line per layer of every wave to w when not in a notebook (in a GoNB cell a
// progress bar shows instead), and the line that says Connect compiles the engine with go run. By
// default nothing is written outside a notebook but that line, to stderr.
func WithProgress(w io.Writer) Option { return func(o *options) { o.progress = w } }

// Connect reaches the resident engine: the one at WithAddr or $POTATO_ADDR (with WithToken or
// $POTATO_TOKEN) if given; else the background engine an earlier cell started, found through its state
// file in the cache directory; else it starts one (see the package documentation) and waits until it
// answers. Later cells reuse it. Close the client when done; the engine stays up for the next cell.
//
// It returns no client and an error that says what to do when the address does not parse, when the
// engine there does not answer, refuses the token (check $POTATO_TOKEN) or is not a potato engine; when
// the background engine is busy past its health check, stopping, or runs another model than WithModel
// names (Shutdown it first); when WithoutStart forbids a start; and when a started engine exits or does
// not answer within WithStartTimeout (the error holds the last lines of its log).
func Connect(opts ...Option) (*Client, error) {
	o := options{startTimeout: 3 * time.Minute}
	for _, opt := range opts {
		opt(&o)
	}
	if o.addr == "" {
		o.addr = os.Getenv(EnvAddr)
	}
	if o.token == "" {
		o.token = os.Getenv(EnvToken)
	}
	if o.addr != "" {
		c, err := newClient(o.addr, o.token, o.progress)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), healthTimeout)
		defer cancel()
		var se *ServerError
		switch _, err := c.Health(ctx); {
		case errors.As(err, &se) && (se.StatusCode == http.StatusUnauthorized || se.StatusCode == http.StatusForbidden):
			return nil, fmt.Errorf("kernel: the engine at %s refused us (check %s): %w", o.addr, EnvToken, err)
		case errors.As(err, &se): // a web server, a proxy: its page says nothing about potato, so only its start
			return nil, fmt.Errorf("kernel: %s is not a potato engine (HTTP %d %s: %s): check %s or WithAddr",
				o.addr, se.StatusCode, http.StatusText(se.StatusCode), clip(se.Message, 120), EnvAddr)
		case err != nil:
			return nil, fmt.Errorf("kernel: the engine at %s does not answer: %w", o.addr, err)
		}
		return c, nil
	}
	return connectBackground(o)
}

// clip cuts s to about n bytes (at a rune boundary) with an ellipsis, and folds it onto one line.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// CacheDir is the cache directory: $POTATO_CACHE, else potato-k3 under the user's cache directory. It is
// where the embedded default model is written (replay/synth.CacheDir, the same rule) and where the
// background engine keeps its state file, log, socket and results (under kernel/). It is an error only
// when $POTATO_CACHE is unset and the system names no user cache directory (no $HOME, say).
func CacheDir() (string, error) {
	if d := os.Getenv(EnvCache); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("kernel: no cache directory (set %s): %w", EnvCache, err)
	}
	return filepath.Join(d, "potato-k3"), nil
}

// stateDir is the background engine's directory under the cache, created private to its owner.
func stateDir() (string, error) {
	root, err := CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "kernel")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("kernel: %w", err)
	}
	return dir, nil
}
