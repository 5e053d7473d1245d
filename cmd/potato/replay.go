package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/potato-k3/potato-k3/datasets"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/tables"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

func init() {
	commands["replay"] = command{"replay text, conversations or token ids teacher-forced; print and save per-token results", runReplay}
}

// replayFlags are the flags of `potato replay`.
type replayFlags struct {
	mem                                  memoryFlags // --slice-tokens, --device-memory, --host-memory
	job                                  jobFlags    // --shard, --wave-tokens (datasetjob.go)
	model, backend, precision            string
	text, chat, thinking, tokens         string
	topK, expertChunk, show              int
	hidden, lens, out                    string
	router, attnres, float16, noProgress bool
}

func runReplay(ctx context.Context, args []string, stdout io.Writer) error {
	var f replayFlags
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.StringVar(&f.model, "model", "", "model directory (default: the embedded synthetic tiny model)")
	fs.StringVar(&f.backend, "backend", "cpu", "backend: cpu or cuda")
	fs.StringVar(&f.precision, "precision", "bf16", "bf16 (rounds where the reference does) or fp32 (audits)")
	fs.StringVar(&f.text, "text", "", "raw text to replay (no BOS is added)")
	fs.StringVar(&f.chat, "chat", "", "conversations to replay: .jsonl (one per line) or .parquet")
	fs.StringVar(&f.thinking, "thinking", "", "with --chat: on or off, for conversations that do not say (required then)")
	fs.StringVar(&f.tokens, "tokens", "", "token ids to replay, comma-separated")
	fs.IntVar(&f.topK, "top-k", 5, "alternatives kept per position")
	fs.StringVar(&f.hidden, "hidden", "", "layers whose hidden state (the running sum p) to return: 0,3,5-7 or all")
	fs.StringVar(&f.lens, "lens", "", "layers to read out with the logit lens: 0,3,5-7 or all")
	fs.BoolVar(&f.router, "router", false, "return every MoE layer's expert choices")
	fs.BoolVar(&f.attnres, "attnres", false, "return every AttnRes mix's weights")
	fs.BoolVar(&f.float16, "float16", false, "store hidden states as float16 instead of float32")
	fs.StringVar(&f.out, "out", "", "write the tables to FILE.arrow (Arrow IPC streams) or FILE.parquet, one file per table")
	fs.IntVar(&f.expertChunk, "expert-chunk", 0, "routed experts resident at once per MoE layer (0: all chosen); results do not depend on it")
	f.mem.register(fs)
	f.job.register(fs)
	fs.IntVar(&f.show, "show", 40, "positions printed per sequence (0: none)")
	fs.BoolVar(&f.noProgress, "no-progress", false, "do not print per-layer progress on stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("replay: unexpected argument %q", fs.Arg(0))
	}
	opts := replay.EngineOptions{ExpertChunk: f.expertChunk, Log: func(s string) { fmt.Fprintln(os.Stderr, "replay: "+s) }}
	f.mem.apply(&opts)
	if !f.noProgress {
		opts.Progress = progressPrinter(os.Stderr)
	}
	if job, err := f.job.wanted(&f); err != nil || job { // --chat and --out DIR/: a dataset job (datasetjob.go)
		if err != nil {
			return err
		}
		return runDatasetJob(ctx, &f, opts, stdout)
	}
	l, err := openEngine(ctx, f.model, f.backend, f.precision, backendTuning{}, opts)
	if err != nil {
		return err
	}
	defer l.Close()
	req, err := f.request(l)
	if err != nil {
		return err
	}
	res, stats, err := l.engine.Run(ctx, []replay.Request{req})
	if err != nil {
		return err
	}
	printSummary(stdout, l, res[0], stats, f.show)
	if f.out == "" {
		return nil
	}
	return writeTables(stdout, l, res[0], f.out, f.float16)
}

// writeTables writes results as Arrow or Parquet tables, one file per table, with provenance metadata and
// the top-k ids named by the tokenizer when the model has one.
func writeTables(stdout io.Writer, l *loaded, res []replay.Result, out string, float16 bool) error {
	opts := tables.Options{HiddenFloat16: float16, Metadata: map[string]string{
		tables.MetaConfigHash: l.engine.ConfigSHA256, tables.MetaEngine: replay.Version,
		tables.MetaPrecision: l.precision.String(), tables.MetaBackend: l.backend,
	}}
	if l.tok != nil {
		opts.Piece = l.tok.Piece
	}
	set, err := tables.Build(res, opts)
	if err != nil {
		return err
	}
	defer set.Release()
	paths, err := tables.WriteSet(out, set)
	if err != nil {
		return err
	}
	for _, p := range paths {
		fmt.Fprintln(stdout, "wrote", p)
	}
	return nil
}

// request turns the input flags into one replay request.
func (f *replayFlags) request(l *loaded) (replay.Request, error) {
	layers := len(l.engine.Plan.Layers)
	var req replay.Request
	var err error
	req.Options.TopK, req.Options.Router, req.Options.AttnRes = f.topK, f.router, f.attnres
	if req.Options.Hidden, err = parseLayers(f.hidden, layers); err != nil {
		return req, fmt.Errorf("--hidden: %w", err)
	}
	if req.Options.Lens, err = parseLayers(f.lens, layers); err != nil {
		return req, fmt.Errorf("--lens: %w", err)
	}
	inputs := 0
	for _, s := range []string{f.text, f.chat, f.tokens} {
		if s != "" {
			inputs++
		}
	}
	if inputs != 1 {
		return req, fmt.Errorf("replay: give exactly one of --text, --chat, --tokens")
	}
	if (f.text != "" || f.chat != "") && l.tok == nil {
		return req, fmt.Errorf("replay: %s has no tiktoken.model: give --tokens", l.dir)
	}
	switch {
	case f.text != "":
		s, err := replay.FromText(l.tok, f.text)
		if err != nil {
			return req, err
		}
		req.Sequences = []replay.Sequence{s}
	case f.tokens != "":
		ids, err := parseIDs(f.tokens)
		if err != nil {
			return req, err
		}
		req.Sequences = []replay.Sequence{replay.FromIDs(l.tok, ids)}
	default:
		convs, err := datasets.Load(f.chat)
		if err != nil {
			return req, err
		}
		if err := applyThinking(convs, f.thinking); err != nil {
			return req, err
		}
		for i, c := range convs {
			s, err := replay.FromConversation(l.tok, c)
			if err != nil {
				return req, fmt.Errorf("%s: conversation %d: %w", f.chat, i+1, err)
			}
			req.Sequences = append(req.Sequences, s)
		}
	}
	return req, req.Validate(l.engine.Model.Dims.Vocab, layers, replay.Limits{})
}

// applyThinking sets the --thinking mode on conversations that do not carry their own.
func applyThinking(convs []tokenizer.Conversation, mode string) error {
	switch mode {
	case "on":
		datasets.SetThinking(convs, tokenizer.ThinkingOn)
	case "off":
		datasets.SetThinking(convs, tokenizer.ThinkingOff)
	case "":
	default:
		return fmt.Errorf("--thinking %q: want on or off", mode)
	}
	for i, c := range convs {
		if c.Thinking == tokenizer.ThinkingUnset {
			return fmt.Errorf("conversation %d says nothing of thinking mode: give --thinking on|off (the model's output depends on it)", i+1)
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
		fmt.Fprintf(w, "layer %d of %d, %d tokens, %.1f MB read (%.1f MB/s), %s elapsed, ETA %s\n",
			p.Layer, p.Layers, p.Tokens, float64(p.BytesRead)/1e6, rate,
			(time.Duration(p.Seconds * float64(time.Second))).Round(time.Millisecond),
			(time.Duration(p.ETASeconds * float64(time.Second))).Round(time.Second))
	}
}
