package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/potato-k3/potato-k3/datasets"
	"github.com/potato-k3/potato-k3/datasets/job"
	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// jobFlags are the flags of `potato replay` that only a dataset job (--chat with --out DIR/) reads.
type jobFlags struct {
	shard      string
	waveTokens int
}

// register adds --shard and --wave-tokens to fs.
func (j *jobFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&j.shard, "shard", "", "with --chat and --out DIR/: replay only shard I/N of the conversations (by id), e.g. 0/4; N jobs cover the dataset exactly once")
	fs.IntVar(&j.waveTokens, "wave-tokens", job.DefaultWaveTokens, "with --chat and --out DIR/: most tokens of one wave of a dataset job, each wave written as a part before the next begins; --max-wave-tokens caps it (the smaller of the two applies), and the plan may cut a wave smaller to run it in one read; results do not depend on it")
}

// wanted reports whether the replay flags ask for a dataset job (--chat with --out naming a directory),
// and refuses the job flags without one.
func (j *jobFlags) wanted(f *replayFlags) (bool, error) {
	if f.chat != "" && f.out != "" && isJobDir(f.out) {
		return true, nil
	}
	if j.shard != "" {
		return false, fmt.Errorf("replay: --shard needs a dataset job: --chat DATA --out DIR/")
	}
	return false, nil
}

// waveBudget is a dataset job's wave size: --wave-tokens, capped by --max-wave-tokens. The engine splits
// a wave past --max-wave-tokens into several passes over the weights on its own, but the job cut its
// waves (and named their size in its summary) by --wave-tokens alone: a part then took several reads,
// where each part is meant to be one.
func (f *replayFlags) waveBudget() int {
	return min(f.job.waveTokens, f.maxWaveTokens)
}

// isJobDir reports whether --out names a directory: it ends in a slash or is an existing directory.
func isJobDir(out string) bool {
	if strings.HasSuffix(out, "/") || strings.HasSuffix(out, string(filepath.Separator)) {
		return true
	}
	st, err := os.Stat(out)
	return err == nil && st.IsDir()
}

// runDatasetJob is `potato replay --chat DATA --out DIR/`: the conversations of DATA (or of its --shard)
// replayed in waves into Parquet parts and a manifest in DIR, resuming what DIR already holds. in is
// check's: the conversations read, their ids checked and their thinking mode applied.
func runDatasetJob(ctx context.Context, f *replayFlags, in input, opts replay.EngineOptions, stdout io.Writer) error {
	if f.text != "" || f.tokens != "" {
		return fmt.Errorf("replay: --out %s is a directory: a dataset job replays --chat only", f.out)
	}
	// Before the model is read: job.Run's mkdir would fail only then, with "mkdir results/: file exists".
	if st, err := os.Stat(filepath.Clean(f.out)); err == nil && !st.IsDir() {
		return fmt.Errorf("replay: --out %s: %s is a file, not a directory: a dataset job writes its parts and manifest into a directory; give a new one (DIR/) or the job's own", f.out, filepath.Clean(f.out))
	}
	shard, err := job.ParseShard(f.job.shard)
	if err != nil {
		return err
	}
	// each conversation's ID is its entry's name (datasets.Conversations), which keys the manifest
	entries, convs := in.entries, in.convs
	if entries == nil { // stdin: a job is keyed by its file's hash
		return fmt.Errorf("replay: --chat %s: a dataset job reads a file (its contents' hash keys the job), not standard input", f.chat)
	}
	dataHash, err := job.FileSHA256(f.chat) // Settings.Dataset
	if err != nil {
		return err
	}
	l, err := openEngine(ctx, f.model, f.backend, f.precision, backendTuning{devices: f.mem.devices}, opts)
	if err != nil {
		return err
	}
	defer l.Close()
	if l.tok == nil {
		return fmt.Errorf("replay: %s has no tokenizer (%v): a dataset job needs it", l.dir, l.tokMissing)
	}
	layers := len(l.engine.Plan.Layers)
	var o replay.Options
	o.TopK, o.Router, o.AttnRes = f.topK, f.router, f.attnres
	if o.Hidden, err = parseLayers(f.hidden, layers); err != nil {
		return fmt.Errorf("--hidden: %w", err)
	}
	if o.Lens, err = parseLayers(f.lens, layers); err != nil {
		return fmt.Errorf("--lens: %w", err)
	}
	var items []job.Item
	req := replay.Request{Options: o}
	// As a single replay's limits: one conversation runs in one wave, so --max-wave-tokens bounds it too
	// (the engine refused it only when its wave came, after the waves before it had run). It is rendered
	// only until it passes the limit.
	// Every conversation past it is counted, so that one run names them all, not one a run.
	limit, flag := f.sequenceLimit()
	var tooLong []string
	for i := range convs {
		if !shard.Has(convs[i].ID) {
			continue
		}
		s, err := replay.FromConversationLimit(l.tok, convs[i], limit)
		if errors.Is(err, replay.ErrTooManyTokens) {
			tooLong = append(tooLong, entryPlace(entries[i]))
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: conversation %s: %w", f.chat, entryPlace(entries[i]), err)
		}
		items = append(items, job.Item{ID: convs[i].ID, Seq: i, Sequence: s})
		req.Sequences = append(req.Sequences, s)
	}
	if len(tooLong) > 0 {
		return tooLongError(f.chat, tooLong, limit, flag)
	}
	if len(items) == 0 {
		// More shards than conversations (or ids that hash elsewhere): the shard is done as soon as it
		// starts, and its directory says so, so that merge finds every shard and a cluster's task succeeds.
		fmt.Fprintf(os.Stderr, "replay: shard %s of %s holds no conversation: %s records it as complete and empty\n", shard, f.chat, f.out)
	} else if err := req.Validate(l.engine.Model.Dims.Vocab, layers, replay.Limits{}); err != nil {
		// Every conversation is checked before the first wave, so that a bad one does not stop the job hours in.
		return err
	}
	if err := checkWaveBytes(f, shapeOf(l), o, items); err != nil {
		return err
	}
	tokHash, err := tokenizerSHA256(l.dir)
	if err != nil {
		return err
	}
	cfg := job.Config{
		Dir: f.out, Dataset: f.chat, DatasetSize: len(entries), Shard: shard, WaveTokens: f.waveBudget(), Options: o,
		Settings: job.Settings{Dataset: dataHash, ConfigHash: l.engine.ConfigSHA256, Weights: l.engine.WeightsSHA256, Tokenizer: tokHash,
			Engine: replay.Version, Precision: l.precision.String(), Backend: l.backend, Thinking: f.thinking,
			TopK: o.TopK, Hidden: o.Hidden, Lens: o.Lens, Router: o.Router, AttnRes: o.AttnRes, Float16: f.float16},
		Tables: tables.Options{HiddenFloat16: f.float16, Piece: l.tok.Piece, Metadata: map[string]string{
			tables.MetaConfigHash: l.engine.ConfigSHA256, tables.MetaWeightsHash: l.engine.WeightsSHA256, tables.MetaEngine: replay.Version,
			tables.MetaPrecision: l.precision.String(), tables.MetaBackend: l.backend,
		}},
		Log: func(s string) { fmt.Fprintln(os.Stderr, s) },
	}
	if f.planOnly {
		return printJobPlan(stdout, cfg, l.engine, items)
	}
	sum, err := job.Run(ctx, l.engine, cfg, items)
	if err != nil {
		if ctx.Err() != nil { // interrupted: the finished parts are kept, and the same command resumes
			// what a researcher acts on first; where the engine was when it stopped last, for a report
			return fmt.Errorf("the job in %s was interrupted: its finished parts are kept, and running the same command again resumes it (stopped in: %w)", f.out, err)
		}
		return err
	}
	rate := 0.0
	if sum.Seconds > 0 {
		rate = float64(sum.TokensRun) / sum.Seconds
	}
	fmt.Fprintf(stdout, "job complete: %s (%s) of shard %s in %s: %s; this run %s, %s skipped, %s in %.1f s (%s tokens/s), %.1f MB of weights read\n",
		numtext.Count(sum.Conversations, "conversation"), numtext.Count(sum.Tokens, "token"), shard, f.out, numtext.Count(sum.Parts, "part"), numtext.Count(sum.Waves, "wave"),
		numtext.Count(sum.Skipped, "conversation"), numtext.Count(sum.TokensRun, "token"), sum.Seconds, numtext.Commas(int64(math.Round(rate))), float64(sum.BytesRead)/1e6)
	return nil
}

// entryPlace names a conversation of a dataset file for an error: its name as the manifest keys it (the
// id, else "line:12"), with its line, item or row when the name is an id.
func entryPlace(e datasets.Entry) string {
	if place := fmt.Sprintf("%s:%d", e.Unit, e.N); e.Name() != place { // a Parquet row without id reads as "row:7"
		return fmt.Sprintf("%s (%s %d)", e.Name(), e.Unit, e.N)
	}
	return e.Name()
}

// tooLongError refuses a dataset job whose conversations at places (entryPlace, in file order) each have
// more than limit tokens, the limit of flag: it names the first few and counts the rest.
func tooLongError(chat string, places []string, limit int, flag string) error {
	const named = 5
	lim := numtext.Commas(int64(limit))
	if len(places) == 1 {
		return fmt.Errorf("replay: %s: conversation %s has more than %s tokens: the limit is %s (%s); raise %s, or leave the conversation out of the file",
			chat, places[0], lim, lim, flag, flag)
	}
	list := strings.Join(places[:min(named, len(places))], ", ")
	if len(places) > named {
		list += fmt.Sprintf(" and %d more", len(places)-named)
	}
	return fmt.Errorf("replay: %s: %d conversations have more than %s tokens: the limit is %s (%s): %s; raise %s, or leave them out of the file",
		chat, len(places), lim, lim, flag, list, flag)
}

// printJobPlan is a dataset job's --plan-only: the waves job.Run would cut the conversations the job's
// directory does not hold yet into (job.Pack with the engine's plan, each wave one read of the weights),
// and the plan line of the largest, without running or writing anything.
func printJobPlan(stdout io.Writer, cfg job.Config, eng *replay.Engine, items []job.Item) error {
	todo, err := job.Pending(cfg, items)
	if err != nil {
		return err
	}
	done := len(items) - len(todo)
	head := fmt.Sprintf("plan: dataset job of %s, shard %s", numtext.Count(len(items), "conversation"), cfg.Shard)
	if done > 0 {
		head += fmt.Sprintf(" (%s done in %s)", numtext.Count(done, "conversation"), cfg.Dir)
	}
	if len(todo) == 0 {
		fmt.Fprintln(stdout, head+": nothing left to run")
		return nil
	}
	waves, err := job.Pack(todo, cfg.WaveTokens, eng.PlanWave)
	if err != nil {
		return err
	}
	tokens, reads := 0, 0
	var largest replay.WavePlan
	for _, w := range waves {
		lens := make([]int, len(w))
		for k, it := range w {
			lens[k] = len(it.Sequence.Tokens)
		}
		p, err := eng.PlanWave(lens)
		if err != nil {
			return err
		}
		tokens += p.Tokens
		reads += p.Waves
		if p.Tokens > largest.Tokens {
			largest = p
		}
	}
	fmt.Fprintf(stdout, "%s: %s to run in %s (--wave-tokens %s), %s of the weights\n", head, numtext.Count(tokens, "token"),
		numtext.Count(len(waves), "wave"), numtext.Commas(cfg.WaveTokens), numtext.Count(reads, "read"))
	fmt.Fprintln(stdout, "plan: the largest wave: "+largest.String())
	return nil
}

// pending is items less the conversations the manifest of the job in dir records as done (all of them
// when dir holds no job yet).
func pending(dir string, items []job.Item) []job.Item {
	m, err := job.ReadManifest(dir)
	if err != nil {
		return items
	}
	return slices.DeleteFunc(slices.Clone(items), func(it job.Item) bool { _, done := m.Done[it.ID]; return done })
}

// checkWaveBytes refuses a job whose largest wave's results, held with their Parquet part while it is
// built and written (a job holds one wave's at a time), would pass --max-result-bytes. The waves are
// job.Pack's first cut of the conversations f.out's manifest does not hold yet (the engine's plan, which
// job.Run adds, only cuts them smaller).
func checkWaveBytes(f *replayFlags, shape tables.Shape, o replay.Options, items []job.Item) error {
	items = pending(f.out, items) // a resumed job: what is done does not run again
	budget := f.waveBudget()
	if budget <= 0 {
		budget = job.DefaultWaveTokens
	}
	waves, err := job.Pack(items, budget, nil)
	if err != nil {
		return err
	}
	var worst tables.Estimate
	var worstWave string
	for _, w := range waves {
		req := replay.Request{Options: o}
		tokens := 0
		for _, it := range w {
			req.Sequences = append(req.Sequences, it.Sequence)
			tokens += len(it.Sequence.Tokens)
		}
		est := shape.Estimate(tables.Output{Request: req, Format: tables.FormatParquet, Float16: f.float16})
		if est.Total() > worst.Total() {
			worst = est
			worstWave = fmt.Sprintf("over the largest wave, %s of conversations %s..%s", numtext.Count(tokens, "token"), w[0].ID, w[len(w)-1].ID)
		}
	}
	return checkEstimate(worst, o, int64(f.maxResult), worstWave, "lower --wave-tokens")
}

// tokenizerSHA256 hashes the files the tokenizer is read from (tiktoken.model, tokenizer_config.json),
// each length-prefixed by its name; "" when the model has neither.
func tokenizerSHA256(dir string) (string, error) {
	h := sha256.New()
	found := false
	for _, name := range []string{"tiktoken.model", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		found = true
		fmt.Fprintf(h, "%s %d\n", name, len(data))
		h.Write(data)
	}
	if !found {
		return "", nil
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
