package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/potato-k3/potato-k3/datasets"
	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/kernel/server"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

func init() {
	commands["replay"] = command{"replay text, conversations or token ids teacher-forced; print and save per-token results", runReplay}
}

// replayUsage is the head of `potato help replay`.
const replayUsage = `usage: potato replay [--model DIR] (--text STRING | --text-file FILE | --chat FILE [--thinking on|off] | --tokens IDS)
                     [--top-k N] [--lens LAYERS] [--hidden LAYERS] [--router] [--attnres] [--out FILE.arrow|.arrows|.parquet] [flags]
       potato replay [--model DIR] --chat FILE [--thinking on|off] --out DIR/ [--shard I/N] [flags]   (a dataset job)

Replays the input teacher-forced and prints a per-token table: each position's next token, its logprob and
rank, the entropy and with --top-k the alternatives. --out writes every table asked for; with --chat, an
--out directory (DIR/, or one that exists) runs a resumable dataset job of Parquet parts.
`

// layerListUsage is how --lens and --hidden are written (parseLayers).
const layerListUsage = "layer numbers from 0 and ranges lo-hi, comma-separated (0,3,5-7), or all; each layer once, kept in the order given"

// replayFlags are the flags of `potato replay`.
type replayFlags struct {
	mem                                    memoryFlags // --slice-tokens, --device-memory, --host-memory
	job                                    jobFlags    // --shard, --wave-tokens (datasetjob.go)
	model, backend, precision              string
	text, textFile, chat, thinking, tokens string
	topK, expertChunk, show                int
	maxTokens, maxWaveTokens, maxRequest   int
	maxResult                              byteSize
	hidden, lens, out                      string
	router, attnres, float16, noProgress   bool
	planOnly                               bool
	stdin                                  io.Reader       // os.Stdin; a test's reader
	set                                    map[string]bool // the flags given, even as "" (fs.Visit)
}

func runReplay(ctx context.Context, args []string, stdout io.Writer) error {
	f := replayFlags{stdin: os.Stdin}
	fs := newFlags("replay", replayUsage)
	d := server.DefaultLimits
	fs.StringVar(&f.model, "model", "", "model directory (default: the embedded demo model, a small K3 trained on text)")
	fs.StringVar(&f.backend, "backend", "cpu", "backend: cpu or cuda")
	fs.StringVar(&f.precision, "precision", "bf16", "bf16 (rounds where the reference does) or fp32 (audits)")
	fs.StringVar(&f.text, "text", "", "raw text to replay (no BOS is added)")
	fs.StringVar(&f.textFile, "text-file", "", "file of raw text to replay, - for stdin (for texts past the argument limit)")
	fs.StringVar(&f.chat, "chat", "", "conversations to replay: .jsonl (one per line), .json or .parquet; - for JSONL on stdin")
	fs.StringVar(&f.thinking, "thinking", "", "with --chat: on or off, for conversations that do not say; a conversation that says the other mode is refused")
	fs.StringVar(&f.tokens, "tokens", "", "token ids to replay, comma-separated")
	fs.IntVar(&f.topK, "top-k", 0, "alternatives kept per position (0, as the service and the engine: none)")
	fs.StringVar(&f.hidden, "hidden", "", "layers whose hidden state (the running sum p) to return: "+layerListUsage)
	fs.StringVar(&f.lens, "lens", "", "layers to read out with the logit lens: "+layerListUsage)
	fs.BoolVar(&f.router, "router", false, "return every MoE layer's expert choices")
	fs.BoolVar(&f.attnres, "attnres", false, "return every AttnRes mix's weights")
	fs.BoolVar(&f.float16, "float16", false, "store hidden states as float16 instead of float32")
	fs.StringVar(&f.out, "out", "", "write the tables to FILE.arrow (Arrow IPC files), FILE.arrows (IPC streams) or FILE.parquet, one file per table; with --chat, DIR/ (a trailing slash) runs a resumable dataset job into DIR (Parquet parts and a manifest; potato merge joins them)")
	fs.IntVar(&f.maxTokens, "max-tokens", d.MaxSequenceTokens, "most tokens of one sequence (as potato serve); a longer one is refused before any compute (text is tokenized only up to it)")
	fs.IntVar(&f.maxWaveTokens, "max-wave-tokens", d.MaxWaveTokens, "most tokens of one wave (as potato serve): more sequences run as several waves, with the same results, and a longer sequence is refused; a dataset job's waves are the smaller of this and --wave-tokens")
	fs.IntVar(&f.maxRequest, "max-request-tokens", d.MaxRequestTokens, "most tokens of all sequences together (as potato serve; --text, --text-file and --tokens are one sequence): the results are held in memory until written (a dataset job holds one wave's at a time and is not bounded by it)")
	fs.Var(&f.maxResult, "max-result-bytes", "most host memory the results may hold until written, e.g. 8GB (0 or unset: half the memory available)")
	fs.IntVar(&f.expertChunk, "expert-chunk", 0, "routed experts resident at once per MoE layer (0: all chosen, or on a device too small for them the largest chunk the plan fits); results do not depend on it")
	f.mem.register(fs)
	f.job.register(fs)
	fs.IntVar(&f.show, "show", 40, "positions printed per sequence (0: none)")
	fs.BoolVar(&f.noProgress, "no-progress", false, "do not print per-layer progress on stderr")
	fs.BoolVar(&f.planOnly, "plan-only", false, "print the plan of the replay's waves (reads of the weights, slices, where the state lives, device peak) and stop, without computing: the model's embedding and lm_head are not even read")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("replay", "replay: unexpected argument %q (every input is given by a flag: --text, --text-file, --chat or --tokens)", fs.Arg(0))
	}
	if err := checkThinkingFlag("replay", f.thinking); err != nil {
		return err
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	in, err := f.check()
	if err != nil {
		return err
	}
	opts := replay.EngineOptions{ExpertChunk: f.expertChunk, MaxWaveTokens: f.maxWaveTokens, PlanOnly: f.planOnly,
		Log: func(s string) { fmt.Fprintln(os.Stderr, "replay: "+s) }}
	f.mem.apply(&opts)
	if !f.noProgress {
		opts.Progress = progressPrinter(os.Stderr)
	}
	if job, err := f.job.wanted(&f); err != nil || job { // --chat and --out DIR/: a dataset job (datasetjob.go)
		if err != nil {
			return err
		}
		return runDatasetJob(ctx, &f, in, opts, stdout)
	}
	return stopped(ctx, f.replay(ctx, stdout, in, opts), f.out)
}

// replay runs a checked replay (not a dataset job): the engine opened, the request built and refused
// where the model says so, the wave run, the table printed and --out written.
func (f *replayFlags) replay(ctx context.Context, stdout io.Writer, in input, opts replay.EngineOptions) error {
	if f.out != "" {
		unlock, err := lockOut(f.out)
		if err != nil {
			return err
		}
		defer unlock()
	}
	l, err := openEngine(ctx, f.model, f.backend, f.precision, backendTuning{devices: f.mem.devices}, opts)
	if err != nil {
		return err
	}
	defer l.Close()
	req, err := f.request(l, in)
	if err != nil {
		return err
	}
	if f.planOnly {
		return printReplayPlan(stdout, l, req)
	}
	res, stats, err := l.engine.Run(ctx, []replay.Request{req})
	if err != nil {
		return err
	}
	printSummary(stdout, l, res[0], stats, f.show, f.out)
	printDevices(stdout, l)
	if f.out == "" {
		return nil
	}
	return writeTables(ctx, stdout, l, &req, res[0], f.out, f.float16)
}

// stopped says of an error that ctx's end caused (Ctrl-C, SIGTERM) what stopped the replay, and that
// --out is as it was (tables.WriteSet writes a set whole or not at all), where the error alone read
// "potato: layer 0: lens: context canceled". Other errors are returned as they are.
func stopped(ctx context.Context, err error, out string) error {
	if err == nil || ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
		return err
	}
	if out == "" {
		return fmt.Errorf("replay: stopped by %v (%w)", context.Cause(ctx), err)
	}
	return fmt.Errorf("replay: stopped by %v (%w): nothing of this run was written, and --out %s is as it was", context.Cause(ctx), err, out)
}

// input is what check read before the engine opened: the text of --text, the conversations of --chat
// (with --thinking applied), or the ids of --tokens. --text-file is read by request, up to what
// --max-tokens can take in the model's tokenizer (textfile.go).
type input struct {
	text  string
	convs []tokenizer.Conversation
	// entries are a --chat file's conversations with their places (not stdin's), convs' order: a
	// dataset job keys its manifest by their names
	entries []datasets.Entry
	ids     []int32
}

// check runs every check that needs no model, before the engine opens: one input, the numbers, the output
// path, and the input files read and parsed (a --text-file opened, read in request), so that no mistake
// surfaces after the replay.
func (f *replayFlags) check() (input, error) {
	var in input
	given := []struct{ name, v string }{{"text", f.text}, {"text-file", f.textFile}, {"chat", f.chat}, {"tokens", f.tokens}}
	inputs := 0
	for _, s := range given {
		if s.v != "" || f.set[s.name] {
			inputs++
		}
	}
	if inputs != 1 {
		return in, usagef("replay", "replay: give exactly one of --text, --text-file, --chat, --tokens")
	}
	for _, s := range given {
		if f.set[s.name] && s.v == "" { // given as "": before, "give exactly one of" as though it were not given
			return in, fmt.Errorf("replay: --%s is empty: nothing to replay", s.name)
		}
	}
	if err := checkNotNegative("replay", intFlag{"--top-k", f.topK}, intFlag{"--expert-chunk", f.expertChunk}, intFlag{"--show", f.show}); err != nil {
		return in, err
	}
	if err := f.mem.check(f.backend); err != nil {
		return in, fmt.Errorf("replay: %w", err)
	}
	if err := checkPositive("replay", intFlag{"--max-tokens", f.maxTokens}, intFlag{"--max-wave-tokens", f.maxWaveTokens},
		intFlag{"--max-request-tokens", f.maxRequest}, intFlag{"--wave-tokens", f.job.waveTokens}); err != nil {
		return in, err
	}
	if _, err := checkEngineFlags(f.backend, f.precision); err != nil {
		return in, fmt.Errorf("replay: %w", err)
	}
	if f.thinking != "" && f.chat == "" {
		return in, errors.New("replay: --thinking is for --chat (text and token ids have no thinking mode)")
	}
	if f.planOnly && !(f.chat != "" && f.out != "" && isJobDir(f.out)) { // a dataset job's plan: its options size its parts
		for _, o := range []struct {
			flag string
			set  bool
		}{{"--out", f.out != ""}, {"--lens", f.lens != ""}, {"--hidden", f.hidden != ""}, {"--router", f.router}, {"--attnres", f.attnres}} {
			if o.set {
				return in, usagef("replay", "replay: --plan-only computes and writes nothing, and %s does not change the plan: drop it (a dataset job's plan, --chat with --out DIR/, takes its flags)", o.flag)
			}
		}
	}
	if f.out == "" { // the printed table is the tokens table's; the others would be computed and dropped
		for _, o := range []struct {
			flag string
			set  bool
		}{{"--lens", f.lens != ""}, {"--hidden", f.hidden != ""}, {"--router", f.router}, {"--attnres", f.attnres}} {
			if o.set {
				return in, fmt.Errorf("replay: %s asks for a table that only --out writes (the printed table is the tokens table): give --out FILE.arrow, .arrows or .parquet", o.flag)
			}
		}
	}
	if f.out != "" && (f.chat == "" || !isJobDir(f.out)) { // a dataset job's directory is the job's to check
		if err := checkReplayOut(f.out, f.chat != ""); err != nil {
			return in, err
		}
	}
	in.text = f.text
	var err error
	var entries []datasets.Entry // a --chat file's conversations with their places (not stdin's)
	switch {
	case f.tokens != "":
		if in.ids, err = parseIDs(f.tokens); err != nil {
			return in, fmt.Errorf("replay: --tokens: %w", err)
		}
	case f.textFile != "": // read once the tokenizer says how much of it --max-tokens can take (request)
		var size int64
		if size, err = checkTextFile("replay", f.textFile); err == nil && size == 0 {
			err = fmt.Errorf("replay: --text-file %s is empty: nothing to replay", f.textFile)
		}
	case f.chat == "-":
		in.convs, err = datasets.ReadJSONL(f.stdin, "stdin")
	case f.chat != "":
		entries, err = datasets.LoadEntries(f.chat) // each with its line, item or row, for the errors below
		in.convs, in.entries = datasets.Conversations(entries), entries
	}
	if err != nil {
		return in, err
	}
	if f.chat != "" {
		if err := checkConversations(f.chat, in.convs, entries); err != nil {
			return in, err
		}
		name := func(i int) string { return fmt.Sprintf("conversation %d (id %q)", i+1, in.convs[i].ID) }
		if entries != nil {
			name = func(i int) string { return "conversation " + entryPlace(entries[i]) }
		}
		if err := applyThinkingNamed(in.convs, f.thinking, name); err != nil {
			return in, fmt.Errorf("replay: %s: %w", f.chat, err)
		}
	}
	return in, nil
}

// checkConversations refuses a chat file that holds no conversations, and one in which two conversations
// share an id: the tables name each conversation by its id (the conversation column), and two of one
// name could be told apart only by their seq_id. With entries (a file's, not stdin's) the message names
// the two by their lines, items or rows.
func checkConversations(name string, convs []tokenizer.Conversation, entries []datasets.Entry) error {
	if len(convs) == 0 {
		return fmt.Errorf("replay: %s holds no conversations", name)
	}
	if entries != nil {
		if err := datasets.CheckEntryIDs(entries); err != nil {
			return fmt.Errorf("replay: %s: %w", name, err)
		}
		return nil
	}
	ids := make([]string, len(convs))
	for i, c := range convs {
		ids[i] = c.ID
	}
	if err := datasets.CheckIDs(ids); err != nil {
		return fmt.Errorf("replay: %s: %w", name, err)
	}
	return nil
}

// request turns the checked input into one replay request, refusing what the model cannot take before
// any compute: layers outside it or given twice, a top-k past the vocabulary, a sequence longer than
// --max-tokens or a wave (text and conversations are tokenized only up to the limit).
func (f *replayFlags) request(l *loaded, in input) (replay.Request, error) {
	layers := len(l.engine.Plan.Layers)
	vocab := l.engine.Model.Dims.Vocab
	var req replay.Request
	var err error
	req.Options.TopK, req.Options.Router, req.Options.AttnRes = f.topK, f.router, f.attnres
	if f.topK > vocab {
		return req, fmt.Errorf("replay: --top-k %d is past the vocabulary (%d ids)", f.topK, vocab)
	}
	if req.Options.Hidden, err = parseLayers(f.hidden, layers); err != nil {
		return req, fmt.Errorf("--hidden: %w", err)
	}
	if req.Options.Lens, err = parseLayers(f.lens, layers); err != nil {
		return req, fmt.Errorf("--lens: %w", err)
	}
	if f.tokens == "" && l.tok == nil {
		return req, fmt.Errorf("replay: %s has no tokenizer (%v): give --tokens", l.dir, l.tokMissing)
	}
	// One sequence is bounded by --max-tokens and by a wave (it cannot be split); --text, --text-file
	// and --tokens are the request's one sequence, so --max-request-tokens bounds them too (conversations
	// are counted together below).
	limit, limitFlag := f.sequenceLimit()
	if in.convs == nil && f.maxRequest < limit {
		limit, limitFlag = f.maxRequest, "--max-request-tokens"
	}
	tooLong := func(what string, n int) error {
		if n < 0 {
			return fmt.Errorf("replay: %s has more than %d tokens: the limit is %d (%s)", what, limit, limit, limitFlag)
		}
		return fmt.Errorf("replay: %s has %d tokens: the limit is %d (%s)", what, n, limit, limitFlag)
	}
	switch {
	case f.tokens != "":
		if len(in.ids) > limit {
			return req, tooLong("--tokens", len(in.ids))
		}
		for pos, id := range in.ids { // as the engine would refuse them, but naming the flag
			if int(id) >= vocab {
				return req, fmt.Errorf("replay: --tokens: position %d: token id %d outside the vocabulary 0..%d", pos, id, vocab-1)
			}
		}
		req.Sequences = []replay.Sequence{replay.FromIDs(l.tok, in.ids)}
	case in.convs == nil:
		text := in.text
		if f.textFile != "" {
			if text, err = readTextFile("replay", f.textFile, f.stdin, l.tok, limit, limitFlag); err != nil {
				return req, err
			}
			if text == "" { // stdin; an empty file is refused before the engine opens (check)
				return req, fmt.Errorf("replay: --text-file %s is empty: nothing to replay", f.textFile)
			}
		}
		s, err := replay.FromTextLimit(l.tok, text, limit)
		if errors.Is(err, replay.ErrTooManyTokens) {
			if f.textFile != "" {
				return req, tooLong("--text-file "+f.textFile, -1)
			}
			return req, tooLong("the text", -1)
		}
		if err != nil {
			return req, err
		}
		req.Sequences = []replay.Sequence{s}
	default:
		// Each conversation is rendered only up to the first limit it would pass, its own or what is left
		// of the request's: one of a million messages is refused after limit+1 tokens, not rendered whole.
		total := 0
		for i, c := range in.convs {
			left := f.maxRequest - total // >= 0: total has not passed it
			s, err := replay.FromConversationLimit(l.tok, c, min(limit, left))
			switch {
			case errors.Is(err, replay.ErrTooManyTokens) && limit <= left:
				return req, tooLong(fmt.Sprintf("%s: conversation %d (id %q)", f.chat, i+1, c.ID), -1)
			case errors.Is(err, replay.ErrTooManyTokens):
				return req, fmt.Errorf("replay: %s: conversations 1..%d have more than %d tokens: the limit is %d (--max-request-tokens)",
					f.chat, i+1, f.maxRequest, f.maxRequest)
			case err != nil:
				return req, fmt.Errorf("%s: conversation %d (id %q): %w", f.chat, i+1, c.ID, err)
			}
			total += len(s.Tokens)
			req.Sequences = append(req.Sequences, s)
		}
	}
	if err := req.Validate(vocab, layers, replay.Limits{}); err != nil {
		return req, err
	}
	return req, f.checkResultBytes(l, req)
}

// sequenceLimit is the most tokens one sequence may have, and the flag that says so: --max-tokens, or
// --max-wave-tokens where it is smaller (a sequence runs in one wave; it cannot be split).
func (f *replayFlags) sequenceLimit() (int, string) {
	if f.maxWaveTokens < f.maxTokens {
		return f.maxWaveTokens, "--max-wave-tokens"
	}
	return f.maxTokens, "--max-tokens"
}

// checkThinkingFlag refuses a --thinking value other than on, off or none as a mistake in cmd's command
// line (exit status 2), before any file is read: applyThinking, which would refuse it too, runs after the
// input is read and named the input file first, as if the file were at fault.
func checkThinkingFlag(cmd, mode string) error {
	if _, ok := thinkingMode(mode); !ok {
		return usagef(cmd, "%s: --thinking %q: want on or off", cmd, mode)
	}
	return nil
}

// thinkingMode is a --thinking value's mode (ThinkingUnset for ""), ok false for any other value.
func thinkingMode(mode string) (tokenizer.Thinking, bool) {
	switch mode {
	case "on":
		return tokenizer.ThinkingOn, true
	case "off":
		return tokenizer.ThinkingOff, true
	case "":
		return tokenizer.ThinkingUnset, true
	}
	return tokenizer.ThinkingUnset, false
}

// applyThinking applies a --thinking mode (on, off or "") to conversations, by one rule shared with the
// service's request-level "thinking": the mode fills in conversations that do not give theirs; one that
// gives the other mode is an error naming it (a flag never silently loses to a line, nor overrides it);
// without the mode every conversation must give its own.
func applyThinking(convs []tokenizer.Conversation, mode string) error {
	return applyThinkingNamed(convs, mode, func(i int) string { return fmt.Sprintf("conversation %d (id %q)", i+1, convs[i].ID) })
}

// applyThinkingNamed is applyThinking with name(i) naming conversation i in its errors (a dataset job
// names it by its id and its line, item or row: entryPlace).
func applyThinkingNamed(convs []tokenizer.Conversation, mode string, name func(i int) string) error {
	t, ok := thinkingMode(mode)
	if !ok {
		return fmt.Errorf("--thinking %q: want on or off", mode)
	}
	for i, c := range convs {
		switch {
		case c.Thinking == tokenizer.ThinkingUnset && t == tokenizer.ThinkingUnset:
			return fmt.Errorf("%s says nothing of thinking mode: give --thinking on|off (the model's output depends on it)", name(i))
		case c.Thinking == tokenizer.ThinkingUnset:
			convs[i].Thinking = t
		case t != tokenizer.ThinkingUnset && c.Thinking != t:
			return fmt.Errorf("%s says \"thinking\": %v but --thinking is %s: remove one of them", name(i), c.Thinking == tokenizer.ThinkingOn, mode)
		}
	}
	return nil
}

// progressPrinter prints a line per layer once a wave has run for a second (short waves stay quiet).
func progressPrinter(w io.Writer) func(replay.Progress) {
	return func(p replay.Progress) {
		if p.Seconds < 1 && p.Layer < p.Layers {
			return
		}
		rate := 0.0
		if p.Seconds > 0 {
			rate = float64(p.BytesRead) / p.Seconds / 1e6
		}
		fmt.Fprintf(w, "layer %d of %d, %s, %.1f MB read (%.1f MB/s), %s elapsed, ETA %s\n",
			p.Layer, p.Layers, numtext.Count(p.Tokens, "token"), float64(p.BytesRead)/1e6, rate,
			(time.Duration(p.Seconds * float64(time.Second))).Round(time.Millisecond), eta(p))
	}
}

// eta formats the time left: after the last layer only the readout (lm_head over the vocabulary), which
// the engine's estimate leaves out; else at least "<1s" (rounding 0.4 s down to "0s" read as done), in
// whole seconds above that.
func eta(p replay.Progress) string {
	switch d := time.Duration(p.ETASeconds * float64(time.Second)); {
	case p.Layer >= p.Layers:
		return "the final readout only"
	case d < time.Second:
		return "<1s"
	default:
		return d.Round(time.Second).String()
	}
}

// printReplayPlan prints the plan of req's waves (--plan-only): the line the engine logs before a
// replay's first layer, from the same planner, with the sequences' token counts.
func printReplayPlan(stdout io.Writer, l *loaded, req replay.Request) error {
	lens := make([]int, len(req.Sequences))
	for i, s := range req.Sequences {
		lens[i] = len(s.Tokens)
	}
	p, err := l.engine.PlanWave(lens)
	if err != nil {
		return err // the planner's errors name the budget and say "replay:"
	}
	fmt.Fprintln(stdout, "plan: "+p.String())
	return nil
}
