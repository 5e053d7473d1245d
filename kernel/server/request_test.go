package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// Every malformed request is a 400 whose message says what is wrong and where.
func TestBadRequests(t *testing.T) {
	ts := startServer(t, Config{Limits: api.Limits{MaxTopK: 5000}}, testHooks{})
	chat := func(extra string) string {
		return `{"inputs": [{"conversation": {"messages": [{"role": "user", "content": "Hi"}]` + extra + `}}]}`
	}
	tests := []struct {
		name, body, want string
	}{
		{"not JSON", `{"inputs": [`, "malformed request JSON"},
		{"empty body", ``, `malformed request JSON: the body is empty: send a job request, such as {"inputs": [{"text": "..."}]`},
		{"white space only", " \n\t", "malformed request JSON: the body is empty"},
		{"cut short", `{"inputs": [{"text": "x"}`, "malformed request JSON: the body ends inside the JSON, after 25 bytes (cut short, or a bracket or quote not closed)"},
		{"quote not closed", `{"inputs": [{"text": "x}]}`, "malformed request JSON: the body ends inside the JSON, after 26 bytes"},
		{"trailing data", `{"inputs": [{"tokens": [1]}]} {}`, "data after the request object"},
		{"unknown field", `{"inputs": [{"tokens": [1]}], "temperature": 0.7}`, `unknown field "temperature"`},
		{"unknown option", `{"inputs": [{"tokens": [1]}], "options": {"steer": 1}}`, `unknown field "steer"`},
		{"file path", `{"inputs": [{"tokens": [1]}], "model": "/etc"}`, `unknown field "model"`},
		{"wrong type", `{"inputs": [{"tokens": "1 2 3"}]}`, "malformed request JSON"},
		{"no inputs", `{"inputs": []}`, "no inputs"},
		{"two kinds in one input", `{"inputs": [{"text": "a", "tokens": [1]}]}`, "inputs[0]: give exactly one of text, conversation, tokens (got 2)"},
		{"empty input", `{"inputs": [{"tokens": [1]}, {}]}`, "inputs[1]: give exactly one"},
		{"empty token list", `{"inputs": [{"tokens": []}]}`, "inputs[0]: empty token list"},
		{"empty text", `{"inputs": [{"text": ""}]}`, "inputs[0]: text: it encodes to no tokens"},
		{"id out of range", `{"inputs": [{"tokens": [1, 2, 3328]}]}`, "inputs[0].tokens[2]: token id 3328 outside the vocabulary 0..3327"},
		{"negative id", `{"inputs": [{"tokens": [-1]}]}`, "inputs[0].tokens[0]: token id -1 outside"},
		{"hidden layer", `{"inputs": [{"tokens": [1]}], "options": {"hidden": [0, 8]}}`, "options.hidden[1]: layer 8 outside 0..7"},
		{"lens layer", `{"inputs": [{"tokens": [1]}], "options": {"lens": [-1]}}`, "options.lens[0]: layer -1 outside 0..7"},
		{"repeated lens layer", `{"inputs": [{"tokens": [1]}], "options": {"lens": [0, 7, 0]}}`, "options.lens[2]: layer 0 appears twice (give each layer once)"},
		{"repeated hidden layer", `{"inputs": [{"tokens": [1]}], "options": {"hidden": [3, 3]}}`, "options.hidden[1]: layer 3 appears twice (give each layer once)"},
		{"top_k past the vocabulary", `{"inputs": [{"tokens": [1]}], "options": {"top_k": 3329}}`, "options.top_k 3329 is past the vocabulary (3328 ids)"},
		{"top_k negative", `{"inputs": [{"tokens": [1]}], "options": {"top_k": -1}}`, "options.top_k -1 is negative"},
		{"precision", `{"inputs": [{"tokens": [1]}], "options": {"precision": "fp8"}}`, `options.precision "fp8": want bf16 or fp32`},
		{"no thinking mode", chat(""), "inputs[0].conversation: no thinking mode"},
		{"thinking without a conversation", `{"inputs": [{"text": "Hi"}, {"tokens": [1]}], "thinking": true}`,
			`thinking: the request's "thinking" is for conversations, and no input is one`},
		{"bad role", `{"inputs": [{"conversation": {"messages": [{"role": "bot", "content": "x"}], "thinking": true}}]}`,
			`inputs[0].conversation.messages[0].role: unknown role "bot"`},
		{"no messages", `{"inputs": [{"conversation": {"messages": []}}], "thinking": false}`, "inputs[0].conversation.messages: no messages"},
		{"conversation not an object", `{"inputs": [{"conversation": 7}], "thinking": false}`, "inputs[0].conversation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := ts.do(t, "POST", api.PathJobs, tt.body)
			var e api.Error
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("%d, body %q is not an api.Error: %v", code, body, err)
			}
			if code != http.StatusBadRequest || !strings.Contains(e.Error, tt.want) {
				t.Errorf("(-want +got):\n-400 …%s…\n+%d %s", tt.want, code, e.Error)
			}
		})
	}
	// The thinking mode may come from the request instead.
	ts.submit(t, api.Request{Inputs: []api.Input{{Conversation: json.RawMessage(`{"messages": [{"role": "user", "content": "Hi"}]}`)}},
		Thinking: new(bool)})
	if len(ts.jobs) != 1 {
		t.Errorf("%d jobs after the refusals and one good request", len(ts.jobs))
	}
}

// Requests past a size limit are refused with 413 and the limit's flag, before anything is queued.
func TestLimits(t *testing.T) {
	ts := startServer(t, Config{Limits: api.Limits{MaxBodyBytes: 4096, MaxSequenceTokens: 10,
		MaxRequestTokens: 15, MaxSequences: 3, MaxTopK: 50}}, testHooks{})
	ids := func(n int) string { return strings.TrimSuffix(strings.Repeat("1,", n), ",") }
	tests := []struct {
		name, body, limit, want string
	}{
		{"body", `{"inputs": [{"text": "` + strings.Repeat("x", 5000) + `"}]}`, "--max-body-bytes",
			"request body too large: the limit is 4096 (--max-body-bytes)"},
		{"sequence", `{"inputs": [{"tokens": [` + ids(11) + `]}]}`, "--max-tokens",
			"inputs[0] has 11 tokens: the limit is 10 (--max-tokens)"},
		{"request", `{"inputs": [{"tokens": [` + ids(8) + `]}, {"tokens": [` + ids(8) + `]}]}`, "--max-request-tokens",
			"the limit is 15 (--max-request-tokens)"},
		{"sequences", `{"inputs": [{"tokens": [1]}, {"tokens": [1]}, {"tokens": [1]}, {"tokens": [1]}]}`, "--max-sequences",
			"4 inputs: the limit is 3 (--max-sequences)"},
		{"top_k", `{"inputs": [{"tokens": [1]}], "options": {"top_k": 51}}`, "--max-top-k",
			"options.top_k is 51: the limit is 50 (--max-top-k)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := ts.do(t, "POST", api.PathJobs, tt.body)
			var e api.Error
			json.Unmarshal(body, &e)
			if code != http.StatusRequestEntityTooLarge || e.Limit != tt.limit || !strings.Contains(e.Error, tt.want) {
				t.Errorf("(-want +got):\n-413 %s …%s…\n+%d %s %s", tt.limit, tt.want, code, e.Limit, e.Error)
			}
		})
	}
	if len(ts.jobs) != 0 {
		t.Errorf("%d jobs queued by refused requests", len(ts.jobs))
	}
	ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}}, Options: api.Options{TopK: 50}}) // at the limits
}

// Unknown jobs, tables and endpoints are 404s that say so.
func TestNotFound(t *testing.T) {
	ts := startServer(t, Config{}, testHooks{})
	id := ts.waitState(t, ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{1, 2}}}}).ID, api.StateDone).ID
	for _, tt := range []struct{ method, path, want string }{
		{"GET", api.JobPath("0123456789abcdef"), "no job 0123456789abcdef: never submitted here, forgotten, or expired (a job is removed --keep 30m0s after its tables were all fetched, or after it failed or was cancelled)"},
		{"GET", api.JobPath("../../etc"), "no job ../../etc: a job id is 16 lower-case hex digits, as POST /v1/jobs answers it"},
		{"GET", api.ProgressPath("0123456789ABCDEF"), "no job 0123456789ABCDEF: a job id is 16 lower-case hex digits"},
		{"POST", api.ReceivedPath("0123456789abcde", "tokens"), "no job 0123456789abcde: a job id is 16 lower-case hex digits"},
		{"GET", api.TablePath(id, "weights"), "no table weights"},
		{"GET", api.TablePath(id, "lens"), "did not capture table lens (it has tokens)"},
		{"POST", api.ReceivedPath(id, "lens"), "did not capture table lens (it has tokens)"},
		{"POST", api.ReceivedPath(id, "weights"), "no table weights"},
		{"GET", "/v1/steer", "no endpoint GET /v1/steer"},
	} {
		code, body := ts.do(t, tt.method, tt.path, "")
		if code != http.StatusNotFound || !strings.Contains(string(body), tt.want) {
			t.Errorf("%s %s: %d %s, want 404 …%s…", tt.method, tt.path, code, body, tt.want)
		}
	}
}

// A path the API has, asked with a method it does not take, is a 405 naming the methods it does take,
// not a 404 (which would say the endpoint is missing).
func TestMethodNotAllowed(t *testing.T) {
	ts := startServer(t, Config{}, testHooks{})
	id := ts.waitState(t, ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{1, 2}}}}).ID, api.StateDone).ID
	for _, tt := range []struct{ method, path, want string }{
		{"PUT", api.PathJobs, "PUT /v1/jobs: this endpoint takes GET or POST"},
		{"POST", api.JobPath(id), "takes GET or DELETE"},
		{"GET", api.JobPath(id) + "/cancel", "takes POST"},
		{"DELETE", api.PathInfo, "takes GET"},
	} {
		code, body := ts.do(t, tt.method, tt.path, "")
		if code != http.StatusMethodNotAllowed || !strings.Contains(string(body), tt.want) {
			t.Errorf("%s %s: %d %s, want 405 …%s…", tt.method, tt.path, code, body, tt.want)
		}
	}
}

// A label is echoed in every status and job list, so one past api.MaxLabelBytes is refused with a 400
// naming the field and the limit (before, only --max-body-bytes bounded it: a 100 kB label came back in
// every GET /v1/jobs); one at the limit, counted in bytes, is accepted and listed as given.
func TestLabelLimit(t *testing.T) {
	ts := startServer(t, Config{}, testHooks{})
	for _, tt := range []struct {
		name, label string
		code        int
		want        string // in the error; "" when accepted
	}{
		{"none", "", http.StatusAccepted, ""},
		{"at the limit", strings.Repeat("x", api.MaxLabelBytes), http.StatusAccepted, ""},
		{"at the limit in two-byte runes", strings.Repeat("é", api.MaxLabelBytes/2), http.StatusAccepted, ""},
		{"one byte over", strings.Repeat("x", api.MaxLabelBytes+1), http.StatusBadRequest,
			"label is 257 bytes: the limit is 256 bytes (a label is a short name shown with the job)"},
		{"one rune over", strings.Repeat("é", api.MaxLabelBytes/2+1), http.StatusBadRequest, "label is 258 bytes: the limit is 256 bytes"},
		{"100 kB", strings.Repeat("x", 100_000), http.StatusBadRequest, "label is 100000 bytes: the limit is 256 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body, _ := json.Marshal(api.Request{Inputs: []api.Input{api.TextInput("x")}, Label: tt.label})
			code, data := ts.do(t, "POST", api.PathJobs, string(body))
			var e api.Error
			json.Unmarshal(data, &e)
			if code != tt.code || !strings.Contains(e.Error, tt.want) || e.Limit != "" {
				t.Fatalf("(-want +got):\n-%d …%s…\n+%d %s (limit %q)", tt.code, tt.want, code, e.Error, e.Limit)
			}
			if tt.code != http.StatusAccepted {
				return
			}
			var st api.JobStatus
			if err := json.Unmarshal(data, &st); err != nil || st.Label != tt.label {
				t.Fatalf("status label %q (%v), want %q", st.Label, err, tt.label)
			}
		})
	}
	_, data := ts.do(t, "GET", api.PathJobs, "")
	var list []api.JobStatus
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	for _, st := range list {
		if len(st.Label) > api.MaxLabelBytes {
			t.Errorf("job %s listed with a %d-byte label", st.ID, len(st.Label))
		}
	}
	if len(list) != 3 {
		t.Errorf("%d jobs listed, want the 3 accepted", len(list))
	}
}
