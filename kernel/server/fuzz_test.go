package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay"
)

// fuzzLimits are small, so that random bodies reach every 413 as well as every 400.
var fuzzLimits = api.Limits{MaxBodyBytes: 4096, MaxSequenceTokens: 48, MaxRequestTokens: 96, MaxSequences: 6,
	MaxTopK: 40, MaxWaveTokens: 64}

var (
	fuzzOnce   sync.Once
	fuzzServer *Server
	fuzzErr    error
)

// fuzzTarget is one server per fuzzing process: only its request decoding is used (nothing is queued),
// so no scheduler work piles up while the fuzzer runs.
func fuzzTarget(t *testing.T) *Server {
	fuzzOnce.Do(func() {
		dir, err := os.MkdirTemp(filepath.Dir(modelDir), "fuzz-spill-") // removed with the model by TestMain
		if err != nil {
			fuzzErr = err
			return
		}
		fuzzServer, fuzzErr = New(context.Background(), Config{ModelDir: modelDir, SpillDir: dir, Limits: fuzzLimits,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	})
	if fuzzErr != nil {
		t.Fatal(fuzzErr)
	}
	return fuzzServer
}

// FuzzRequest feeds arbitrary bodies to the job-request decoder and validator that POST /v1/jobs runs
// (decodeRequest, then build). It must never panic; every refusal is an *httpError with a 4xx status, a
// message, and for a 413 the limit's flag, and it renders as an api.Error; whatever it accepts is valid
// JSON, within every limit, valid for the engine (replay.Request.Validate), and built the same way twice.
//
//	go test ./kernel/server -run '^$' -fuzz FuzzRequest -fuzztime 2m
func FuzzRequest(f *testing.F) {
	for _, seed := range []string{
		`{"inputs": [{"tokens": [1, 2, 3]}]}`,
		`{"inputs": [{"text": "The quick brown fox"}], "options": {"top_k": 5, "lens": [0, 7], "hidden": [3]}}`,
		`{"inputs": [{"conversation": {"messages": [{"role": "user", "content": "Hi"}], "thinking": false}}]}`,
		`{"inputs": [{"conversation": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}], "thinking": true}`,
		`{"inputs": [{"conversation": {"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]}]}}], "thinking": false}`,
		`{"inputs": [{"tokens": [1]}, {"text": "a"}], "options": {"lens_all": true, "router": true, "attnres": true, "precision": "fp32", "float16": true}, "label": "x"}`,
		`{"inputs": [{"tokens": [1]}]} {}`,
		`{"inputs": [{"tokens": [99999999999]}]}`,
		`{"inputs": [{"tokens": [-1]}], "options": {"top_k": -3}}`,
		`{"inputs": [{"text": "\u0000\ud800<|im_end|>"}]}`,
		`{"inputs": null, "options": null}`,
		`[]`, `null`, `{"inputs": [{}]}`, `{"inputs": [{"conversation": 7}], "thinking": false}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s := fuzzTarget(t)
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("POST", api.PathJobs, bytes.NewReader(body))
		req, err := decodeRequest(rec, r, s.cfg.Limits.MaxBodyBytes, 0)
		var rr replay.Request
		if err == nil {
			rr, _, err = s.build(req)
		}
		if err != nil {
			checkRefusal(t, err)
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted a body that is not one JSON value: %q", body)
		}
		lim := s.cfg.Limits
		if len(rr.Sequences) != len(req.Inputs) || len(rr.Sequences) > lim.MaxSequences {
			t.Fatalf("%d sequences from %d inputs (limit %d)", len(rr.Sequences), len(req.Inputs), lim.MaxSequences)
		}
		total := 0
		for i, seq := range rr.Sequences {
			if n := len(seq.Tokens); n == 0 || n > lim.MaxSequenceTokens {
				t.Fatalf("sequence %d has %d tokens (limit %d)", i, n, lim.MaxSequenceTokens)
			}
			total += len(seq.Tokens)
		}
		if total > lim.MaxRequestTokens {
			t.Fatalf("accepted %d tokens (limit %d)", total, lim.MaxRequestTokens)
		}
		if rr.Options.TopK > lim.MaxTopK {
			t.Fatalf("accepted top_k %d (limit %d)", rr.Options.TopK, lim.MaxTopK)
		}
		if err := rr.Validate(s.info.Vocab, s.info.Layers, replay.Limits{}); err != nil {
			t.Fatalf("accepted a request the engine refuses: %v", err)
		}
		again, _, err := s.build(req)
		if err != nil || !reflect.DeepEqual(again, rr) {
			t.Fatalf("building the same request twice differs (%v)", err)
		}
	})
}

// checkRefusal fails the test unless err is a client error as the API promises: an *httpError with a
// 4xx status and a message, a 413 naming its limit's flag, rendered as an api.Error with the same text.
func checkRefusal(t *testing.T, err error) {
	t.Helper()
	var he *httpError
	if !errors.As(err, &he) {
		t.Fatalf("refusal is not an *httpError: %T %v", err, err)
	}
	if he.status < 400 || he.status > 499 || he.msg == "" {
		t.Fatalf("refusal %d %q: want a 4xx with a message", he.status, he.msg)
	}
	if (he.status == http.StatusRequestEntityTooLarge) != (he.limit != "") {
		t.Fatalf("refusal %d names limit %q", he.status, he.limit)
	}
	w := httptest.NewRecorder()
	writeError(w, err)
	var e api.Error
	if jerr := json.Unmarshal(w.Body.Bytes(), &e); jerr != nil || w.Code != he.status || e.Error != he.msg || e.Limit != he.limit {
		t.Fatalf("refusal rendered as %d %q (%v), want %d %q", w.Code, w.Body.Bytes(), jerr, he.status, he.msg)
	}
}
