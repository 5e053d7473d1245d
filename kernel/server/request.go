package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/potato-k3/potato-k3/datasets"
	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/tables"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// httpError is an error with the status it is answered with and, for a refused size, the limit's flag.
type httpError struct {
	status int
	msg    string
	limit  string
}

func (e *httpError) Error() string { return e.msg }

// badRequest is a 400 with a formatted message.
func badRequest(format string, args ...any) *httpError {
	return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// tooLarge is a 413 naming the limit's flag and value.
func tooLarge(flag string, limit int64, format string, args ...any) *httpError {
	return &httpError{status: http.StatusRequestEntityTooLarge, limit: flag,
		msg: fmt.Sprintf(format, args...) + fmt.Sprintf(": the limit is %d (%s)", limit, flag)}
}

// decodeRequest reads one JSON request body within timeout (0: none), refusing unknown fields, keys
// given twice or in another case than the field's (checkKeys), and trailing data.
func decodeRequest(w http.ResponseWriter, r *http.Request, limit int64, timeout time.Duration) (api.Request, error) {
	var req api.Request
	rc := http.NewResponseController(w)
	if timeout > 0 && rc.SetReadDeadline(time.Now().Add(timeout)) == nil {
		defer func() {
			if w.Header().Get("Connection") != "close" {
				rc.SetReadDeadline(time.Time{})
			}
		}()
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return req, tooLarge("--max-body-bytes", limit, "request body too large")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		// close the connection after the answer: net/http would otherwise wait for the rest of the body
		w.Header().Set("Connection", "close")
		return req, &httpError{status: http.StatusRequestTimeout,
			msg: fmt.Sprintf("the request body did not arrive within %v (--read-timeout)", timeout)}
	}
	if err != nil {
		return req, badRequest("reading the request: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 { // else encoding/json's bare "EOF"
		return req, badRequest(`malformed request JSON: the body is empty: send a job request, such as {"inputs": [{"text": "..."}], "options": {"top_k": 5}}`)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err = dec.Decode(&req)
	if ute := (*json.UnmarshalTypeError)(nil); errors.As(err, &ute) {
		// encoding/json names only the Go field (Input.inputs.tokens); checkKeys names the value itself
		// (inputs[0].tokens[3]), and says what it wanted
		if werr := checkKeys(body, reflect.TypeFor[api.Request]()); werr != nil {
			err = werr
		}
	}
	if err == nil { // only white space may follow (dec.More would let a stray '}' or ']' through)
		if _, err = dec.Token(); err == io.EOF {
			err = nil
		} else {
			err = errors.New("data after the request object")
		}
	}
	if err == nil {
		err = checkKeys(body, reflect.TypeFor[api.Request]())
	}
	if errors.Is(err, io.ErrUnexpectedEOF) { // else a bare "unexpected EOF"
		err = fmt.Errorf("the body ends inside the JSON, after %d bytes (cut short, or a bracket or quote not closed)", len(body))
	}
	if err != nil {
		return req, badRequest("malformed request JSON: %v%s", err, requestHint(err))
	}
	return req, nil
}

// requestHint is a pointer to the request's shape for the mistakes a first request makes: an input's
// field at the top level, "lens": "all".
func requestHint(err error) string {
	msg := err.Error()
	for _, f := range []string{`"text"`, `"tokens"`, `"conversation"`} {
		if strings.Contains(msg, "unknown field "+f) {
			return ` (inputs go in a list: {"inputs": [{` + f + `: ...}], "options": {...}})`
		}
	}
	switch {
	case strings.HasPrefix(msg, "options.lens:"):
		return ` (a list of layers, such as [0, 3]; "lens_all": true for every layer)`
	case strings.HasPrefix(msg, "options.hidden:"):
		return " (a list of layers, such as [0, 3])"
	}
	return ""
}

// build turns a decoded request into what the engine replays: each input tokenized, every limit and
// option checked. Errors are *httpError with a message that names the input or option at fault.
func (s *Server) build(req api.Request) (replay.Request, ops.Precision, error) {
	lim := s.cfg.Limits
	var out replay.Request
	prec := s.prec
	if err := checkLabel(req.Label); err != nil {
		return out, prec, err
	}
	if req.Options.Precision != "" {
		p, err := ops.ParsePrecision(req.Options.Precision)
		if err != nil {
			return out, prec, badRequest("options.precision %q: want bf16 or fp32", req.Options.Precision)
		}
		prec = p
	}
	if len(req.Inputs) == 0 {
		return out, prec, badRequest("no inputs: give at least one {\"text\"}, {\"conversation\"} or {\"tokens\"}")
	}
	if len(req.Inputs) > lim.MaxSequences {
		return out, prec, tooLarge("--max-sequences", int64(lim.MaxSequences), "%d inputs", len(req.Inputs))
	}
	// As potato replay's --thinking without --chat: a mode given for inputs that have none is a mistake
	// (the caller may believe it changed their text), not something to ignore.
	if req.Thinking != nil && !slices.ContainsFunc(req.Inputs, func(in api.Input) bool { return in.Conversation != nil }) {
		return out, prec, badRequest("thinking: the request's \"thinking\" is for conversations, and no input is one (text and token ids have no thinking mode): remove it")
	}
	total := 0
	for i, in := range req.Inputs {
		// Text is tokenized only up to the first limit it would pass: a 60 MB text is refused after its
		// first --max-tokens tokens, not tokenized whole (2.95 GB and 12 s) and then refused.
		limit := textLimit{n: lim.MaxSequenceTokens, flag: "--max-tokens"}
		if lim.MaxWaveTokens < limit.n {
			limit = textLimit{n: lim.MaxWaveTokens, flag: "--max-wave-tokens"}
		}
		if left := lim.MaxRequestTokens - total; left < limit.n {
			limit = textLimit{n: left, flag: "--max-request-tokens", request: lim.MaxRequestTokens}
		}
		seq, err := s.sequence(i, in, req.Thinking, limit)
		if err != nil {
			return out, prec, err
		}
		if n := len(seq.Tokens); n > lim.MaxSequenceTokens {
			return out, prec, tooLarge("--max-tokens", int64(lim.MaxSequenceTokens), "inputs[%d] has %d tokens", i, n)
		}
		if n := len(seq.Tokens); n > lim.MaxWaveTokens { // no wave could hold it: the engine would refuse it
			return out, prec, tooLarge("--max-wave-tokens", int64(lim.MaxWaveTokens), "inputs[%d] has %d tokens", i, n)
		}
		total += len(seq.Tokens)
		if total > lim.MaxRequestTokens {
			return out, prec, tooLarge("--max-request-tokens", int64(lim.MaxRequestTokens),
				"the request has more than %d tokens (inputs[0..%d])", total-1, i)
		}
		out.Sequences = append(out.Sequences, seq)
	}
	o, err := s.options(req.Options)
	if err != nil {
		return out, prec, err
	}
	out.Options = o
	if err := out.Validate(s.info.Vocab, s.info.Layers, replay.Limits{}); err != nil {
		return out, prec, badRequest("%v", err)
	}
	if est := s.estimate(out, req.Options.Float16); est.Total() > lim.MaxResultBytes {
		return out, prec, tooLarge("--max-result-bytes", lim.MaxResultBytes,
			"the results would hold about %s until written, for %d lens and %d hidden layers and top_k %d over %d tokens (ask for fewer layers or a smaller top_k, or split the request)",
			est, len(o.Lens), len(o.Hidden), o.TopK, total)
	}
	return out, prec, nil
}

// checkLabel refuses a label longer than api.MaxLabelBytes with a 400 that names the field and the
// limit: every status and job list echoes the label, so its size is bounded apart from the body's. It is
// a fixed rule of the wire format, not a flag, so the answer is 400 with no "limit", as for a layer
// outside the model.
func checkLabel(label string) error {
	if len(label) > api.MaxLabelBytes {
		return badRequest("label is %d bytes: the limit is %d bytes (a label is a short name shown with the job)", len(label), api.MaxLabelBytes)
	}
	return nil
}

// estimate is what r's results hold until they are spilled, replayed alone: the results, the tables
// built from them batch by batch and the Parquet writer (spill).
func (s *Server) estimate(r replay.Request, float16 bool) tables.Estimate {
	return s.shape.Estimate(tables.Output{Request: r, Format: tables.FormatParquet, Float16: float16, Streamed: true})
}

// textLimit is the most tokens input i may have and the flag that sets it; request is the request's
// limit when what is left of it is the bound.
type textLimit struct {
	n, request int
	flag       string
}

// refuse is the 413 of input i past the limit, counting stopped where.
func (l textLimit) refuse(i int, where string) error {
	if l.request > 0 {
		return tooLarge(l.flag, int64(l.request), "the request has more than %d tokens (inputs[0..%d], %s)", l.request, i, where)
	}
	return tooLarge(l.flag, int64(l.n), "inputs[%d] has more than %d tokens (%s)", i, l.n, where)
}

// sequence tokenizes input i, a text or conversation only up to limit tokens.
func (s *Server) sequence(i int, in api.Input, thinking *bool, limit textLimit) (replay.Sequence, error) {
	given := 0
	for _, set := range []bool{in.Text != nil, in.Conversation != nil, in.Tokens != nil} {
		if set {
			given++
		}
	}
	if given != 1 {
		return replay.Sequence{}, badRequest("inputs[%d]: give exactly one of text, conversation, tokens (got %d)", i, given)
	}
	if in.Tokens != nil {
		if len(in.Tokens) == 0 {
			return replay.Sequence{}, badRequest("inputs[%d]: empty token list", i)
		}
		for p, id := range in.Tokens {
			if id < 0 || int(id) >= s.info.Vocab {
				return replay.Sequence{}, badRequest("inputs[%d].tokens[%d]: token id %d outside the vocabulary 0..%d", i, p, id, s.info.Vocab-1)
			}
		}
		return replay.FromIDs(s.tok, in.Tokens), nil
	}
	if s.tok == nil {
		return replay.Sequence{}, badRequest("inputs[%d]: the model directory has no tokenizer: send token ids", i)
	}
	if in.Text != nil {
		seq, err := replay.FromTextLimit(s.tok, *in.Text, limit.n)
		if errors.Is(err, replay.ErrTooManyTokens) {
			return seq, limit.refuse(i, "tokenizing stopped there")
		}
		if err != nil {
			return seq, badRequest("inputs[%d]: %v", i, err)
		}
		return seq, nil
	}
	c, err := conversation(in.Conversation, fmt.Sprintf("inputs[%d].conversation", i))
	if err != nil {
		return replay.Sequence{}, err
	}
	// The one thinking rule (as potato replay's --thinking): the request's mode fills in a conversation
	// that gives none; a conversation that gives the other mode is refused, not silently preferred.
	if thinking != nil {
		want := tokenizer.ThinkingOff
		if *thinking {
			want = tokenizer.ThinkingOn
		}
		switch c.Thinking {
		case tokenizer.ThinkingUnset:
			c.Thinking = want
		case want:
		default:
			return replay.Sequence{}, badRequest("inputs[%d].conversation.thinking: %v conflicts with the request's \"thinking\": %v: remove one of them",
				i, c.Thinking == tokenizer.ThinkingOn, *thinking)
		}
	}
	if c.Thinking == tokenizer.ThinkingUnset {
		return replay.Sequence{}, badRequest("inputs[%d].conversation: no thinking mode: set \"thinking\" on the conversation or the request (the model's output depends on it)", i)
	}
	if c.ID == "" {
		c.ID = strconv.Itoa(i) // the input's index, as seq_id counts inputs
	}
	// Rendered only up to the limit, as text: a conversation of a million messages, or of one huge tool
	// output, is refused after limit+1 tokens, not rendered whole (content and reasoning alone were
	// counted first, which left the markup, names and tool calls of any number of messages unbounded).
	seq, err := replay.FromConversationLimit(s.tok, c, limit.n)
	var over *replay.TooManyTokensError
	if errors.As(err, &over) {
		if over.Message < 0 {
			return seq, limit.refuse(i, "counting stopped outside the messages")
		}
		return seq, limit.refuse(i, fmt.Sprintf("counting stopped in messages[%d]", over.Message))
	}
	if err != nil {
		return seq, badRequest("inputs[%d].conversation: %v", i, err)
	}
	return seq, nil
}

// conversation parses one conversation in the common chat shape with package datasets, so that the
// service reads exactly what a dataset file may hold; path prefixes the field names in errors.
func conversation(raw json.RawMessage, path string) (tokenizer.Conversation, error) {
	var list bytes.Buffer
	list.WriteByte('[')
	list.Write(raw)
	list.WriteByte(']')
	convs, err := datasets.ReadJSON(&list, path)
	var de *datasets.Error
	switch {
	case errors.As(err, &de) && de.Field != "":
		return tokenizer.Conversation{}, badRequest("%s.%s: %v", path, de.Field, de.Err)
	case errors.As(err, &de):
		return tokenizer.Conversation{}, badRequest("%s: %v", path, de.Err)
	case err != nil:
		return tokenizer.Conversation{}, badRequest("%s: %v", path, err)
	case len(convs) != 1:
		return tokenizer.Conversation{}, badRequest("%s: want one conversation object", path)
	}
	var given struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(raw, &given) != nil || given.ID == nil || string(given.ID) == "null" {
		convs[0].ID = "" // not the "1" of the one-item list: sequence names it by its input
	}
	return convs[0], nil
}

// options checks the capture options against the model and the limits.
func (s *Server) options(o api.Options) (replay.Options, error) {
	layers := s.info.Layers
	if o.TopK < 0 {
		return replay.Options{}, badRequest("options.top_k %d is negative", o.TopK)
	}
	if o.TopK > s.cfg.Limits.MaxTopK { // a size limit, answered as the others
		return replay.Options{}, tooLarge("--max-top-k", int64(s.cfg.Limits.MaxTopK), "options.top_k is %d", o.TopK)
	}
	if o.TopK > s.info.Vocab {
		return replay.Options{}, badRequest("options.top_k %d is past the vocabulary (%d ids)", o.TopK, s.info.Vocab)
	}
	for _, list := range []struct {
		name   string
		layers []int
	}{{"hidden", o.Hidden}, {"lens", o.Lens}} {
		var le *replay.LayerError
		if err := replay.CheckLayers(list.layers, layers); errors.As(err, &le) {
			return replay.Options{}, badRequest("options.%s[%d]: %v", list.name, le.Index, err)
		}
	}
	out := replay.Options{TopK: o.TopK, Hidden: sortedSet(o.Hidden), Lens: sortedSet(o.Lens),
		Router: o.Router, AttnRes: o.AttnRes}
	if o.LensAll {
		out.Lens = make([]int, layers)
		for l := range out.Lens {
			out.Lens[l] = l
		}
	}
	return out, nil
}

// sortedSet is layers (checked by replay.CheckLayers: no repeats) in increasing order.
func sortedSet(layers []int) []int {
	if len(layers) == 0 {
		return nil
	}
	out := slices.Clone(layers)
	slices.Sort(out)
	return out
}
