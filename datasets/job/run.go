package job

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/potato-k3/potato-k3/internal/filelock"
	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// Engine is what a job needs of *replay.Engine: running a wave, and planning one without running it.
type Engine interface {
	Run(ctx context.Context, reqs []replay.Request) ([][]replay.Result, replay.WaveStats, error)
	PlanWave(lens []int) (replay.WavePlan, error)
}

// DefaultWaveTokens is the default budget of a job's wave: large enough that a full K3 pass is
// copy-bound on an H200 (DESIGN.md: below roughly 100k tokens the read dominates), small enough that a
// crash loses about a minute of GPU time there.
const DefaultWaveTokens = 65536

// Config is one job: where it writes, what it computes and how big its waves are.
type Config struct {
	Dir         string
	Settings    Settings
	Dataset     string // the dataset's path, recorded in the manifest
	DatasetSize int    // conversations in the whole dataset (all shards)
	Shard       Shard
	// WaveTokens bounds the tokens of one wave (0: DefaultWaveTokens); a wave is also cut to what the
	// engine's plan runs in one read of the weights. A conversation longer than it runs alone.
	WaveTokens int
	Options    replay.Options // must agree with Settings (TopK, Hidden, Lens, Router, AttnRes)
	// Tables builds the parts: Piece names the top-k ids, HiddenFloat16 must equal Settings.Float16, and
	// Metadata is stored in every part's schema, as a single replay stores it.
	Tables tables.Options
	// Log receives the job's lines: the resume summary, each wave's progress, warnings.
	Log func(string)
}

// Summary is what one Run did.
type Summary struct {
	Conversations, Done int   // of the shard, and finished (before this run included)
	Tokens, TokensDone  int64 // likewise in tokens
	Skipped             int   // conversations already done when the run began
	Waves               int   // waves this run replayed
	Parts               int   // parts in the directory
	TokensRun           int64 // tokens this run replayed
	BytesRead           int64 // weight bytes this run's waves read
	Seconds             float64
}

// Run replays items (the shard's conversations, in dataset order) into cfg.Dir, resuming what the
// directory already holds: conversations in its manifest are skipped, part files the manifest does not
// name (an interrupted wave's) are deleted, and the rest runs in waves, each written as Parquet parts and
// recorded in the manifest before the next begins. A directory whose manifest has another key or shard is
// refused with the differing settings named.
func Run(ctx context.Context, eng Engine, cfg Config, items []Item) (Summary, error) {
	var sum Summary
	if cfg.WaveTokens <= 0 {
		cfg.WaveTokens = DefaultWaveTokens
	}
	if cfg.Shard.Count == 0 {
		cfg.Shard = Shard{0, 1}
	}
	if cfg.Tables.HiddenFloat16 != cfg.Settings.Float16 {
		return sum, fmt.Errorf("job: Tables.HiddenFloat16 and Settings.Float16 differ")
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return sum, fmt.Errorf("job: %w", err)
	}
	unlock, err := lockDir(cfg.Dir)
	if err != nil {
		return sum, err
	}
	defer unlock()
	m, err := openManifest(cfg, items)
	if err != nil {
		return sum, err
	}
	if err := tidy(cfg.Dir, m, cfg.log); err != nil {
		return sum, err
	}
	var todo []Item
	for _, it := range items {
		sum.Conversations++
		sum.Tokens += int64(len(it.Sequence.Tokens))
		if _, ok := m.Done[it.ID]; ok {
			sum.Skipped++
			sum.TokensDone += int64(len(it.Sequence.Tokens))
			continue
		}
		todo = append(todo, it)
	}
	sum.Done = sum.Skipped
	waves, err := Pack(todo, cfg.WaveTokens, eng.PlanWave)
	if err != nil {
		return sum, err
	}
	if sum.Skipped > 0 {
		hold := "hold"
		if len(m.Parts) == 1 {
			hold = "holds"
		}
		cfg.log(fmt.Sprintf("job: resuming %s: %s %s %s of %s conversations; %s to go in %s",
			cfg.Dir, numtext.Count(len(m.Parts), "part"), hold, numtext.Commas(int64(sum.Skipped)), numtext.Commas(int64(sum.Conversations)), numtext.Commas(int64(len(todo))), numtext.Count(len(waves), "wave")))
	} else {
		// A conversation past the wave budget runs as a wave of its own (Pack): say so, or "at most 70
		// tokens" would be wrong of the wave that holds an 84-token conversation.
		longer, longest := 0, 0
		for _, it := range todo {
			if n := len(it.Sequence.Tokens); n > cfg.WaveTokens {
				longer, longest = longer+1, max(longest, n)
			}
		}
		alone := ""
		if longer > 0 {
			alone = fmt.Sprintf(" (%s longer than that, up to %s tokens, each a wave of its own)", numtext.Count(longer, "conversation"), numtext.Commas(longest))
		}
		cfg.log(fmt.Sprintf("job: %s (%s tokens) of shard %s in %s of at most %s tokens%s into %s",
			numtext.Count(sum.Conversations, "conversation"), numtext.Commas(sum.Tokens), cfg.Shard, numtext.Count(len(waves), "wave"), numtext.Commas(int64(cfg.WaveTokens)), alone, cfg.Dir))
	}
	start := time.Now()
	for w, wave := range waves {
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		part, err := runWave(ctx, eng, cfg, m, wave)
		if err != nil {
			return sum, fmt.Errorf("job: wave %d of %d: %w", w+1, len(waves), err)
		}
		sum.Waves++
		sum.Done += len(wave)
		sum.TokensDone += part.Tokens
		sum.TokensRun += part.Tokens
		sum.BytesRead += part.BytesRead
		sum.Seconds = time.Since(start).Seconds()
		cfg.log(progressLine(w+1, len(waves), part, sum))
	}
	sum.Seconds = time.Since(start).Seconds()
	sum.Parts = len(m.Parts)
	if !m.Complete {
		m.Complete = true
		if err := m.write(cfg.Dir); err != nil {
			return sum, err
		}
	}
	return sum, nil
}

func (c Config) log(s string) {
	if c.Log != nil {
		c.Log(s)
	}
}

// openManifest reads the directory's manifest and checks that it is this job's, or starts a new one.
func openManifest(cfg Config, items []Item) (*Manifest, error) {
	key := cfg.Settings.Key()
	m, err := ReadManifest(cfg.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		// Part files without a manifest are not this job's to resume or to tidy away (tidy deletes the
		// part files a manifest does not name): another job's whose manifest went, or a user's.
		if found, err := partFiles(cfg.Dir); err != nil {
			return nil, err
		} else if len(found) > 0 {
			return nil, fmt.Errorf("job: %s holds part files (%s) but no %s: it is no job this can resume, and starting one here would delete them; give an empty or new --out directory",
				cfg.Dir, strings.Join(found, ", "), ManifestName)
		}
		m = &Manifest{Format: Format, Key: key, Settings: cfg.Settings, Dataset: cfg.Dataset,
			Conversations: cfg.DatasetSize, Shard: cfg.Shard.String(), Done: map[string]Done{}}
		for _, it := range items {
			m.ShardConversations++
			m.ShardTokens += int64(len(it.Sequence.Tokens))
		}
		return m, m.write(cfg.Dir)
	}
	if err != nil {
		return nil, err
	}
	return m, m.resumes(cfg)
}

// resumes refuses a manifest that is not cfg's job: another key (settings) or another shard.
func (m *Manifest) resumes(cfg Config) error {
	if key := cfg.Settings.Key(); m.Key != key && !m.Settings.SameJob(cfg.Settings) {
		return fmt.Errorf("job: %s holds a job with other settings (key %.12s, this one %.12s): %s; "+
			"give another --out directory, or the same settings to resume", cfg.Dir, m.Key, key,
			strings.Join(m.Settings.Diff(cfg.Settings), "; "))
	}
	if m.Shard != cfg.Shard.String() {
		return fmt.Errorf("job: %s holds shard %s, this job is shard %s: give each shard its own directory", cfg.Dir, m.Shard, cfg.Shard)
	}
	return nil
}

// Pending is what Run would replay of items in cfg.Dir, read without writing or locking anything: the
// items the directory's manifest does not record as done (all of them where it holds no job), refused as
// Run refuses a directory of another job or of part files without a manifest. For a plan before a job.
func Pending(cfg Config, items []Item) ([]Item, error) {
	if cfg.Shard.Count == 0 {
		cfg.Shard = Shard{0, 1}
	}
	m, err := ReadManifest(cfg.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		if found, err := partFiles(cfg.Dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		} else if len(found) > 0 {
			return nil, fmt.Errorf("job: %s holds part files (%s) but no %s: it is no job this can resume, and starting one here would delete them; give an empty or new --out directory",
				cfg.Dir, strings.Join(found, ", "), ManifestName)
		}
		return items, nil
	}
	if err != nil {
		return nil, err
	}
	if err := m.resumes(cfg); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(slices.Clone(items), func(it Item) bool { _, done := m.Done[it.ID]; return done }), nil
}

// tidy makes the directory hold exactly what the manifest names: parts whose files are missing, of
// another size or with other bytes (their SHA-256) are dropped from it (their conversations run again),
// and part files or temporary files and folders it does not name (a wave that was in flight) are
// deleted. Other files are left alone.
func tidy(dir string, m *Manifest, log func(string)) error {
	named := map[string]bool{}
	kept := m.Parts[:0]
	for _, p := range m.Parts {
		ok := true
		for _, f := range p.Files {
			// A path that is not a plain name (a manifest edited or copied from elsewhere) is never
			// followed out of the job directory: the part counts as damaged and runs again.
			if ok && (!plainName(p.Name) || !plainName(f.Path) || !intact(filepath.Join(dir, f.Path), f)) {
				ok = false
			}
		}
		if !ok {
			log(fmt.Sprintf("job: warning: %s's files are missing or changed: its conversations run again", p.Name))
			for id, d := range m.Done {
				if d.Part == p.Name {
					delete(m.Done, id)
				}
			}
			m.Complete = false
			continue
		}
		kept = append(kept, p)
		for _, f := range p.Files {
			named[f.Path] = true
		}
	}
	dropped := len(kept) != len(m.Parts)
	m.Parts = kept
	if dropped {
		if err := m.write(dir); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("job: %w", err)
	}
	removed := 0
	for _, e := range entries {
		n := e.Name()
		stray := partFile(n) && !named[n] // only names Run writes: a user's part-0.parquet is not ours
		temp := (strings.HasPrefix(n, ".part-") || strings.HasPrefix(n, "."+ManifestName+".")) && strings.HasSuffix(n, ".tmp")
		if stray || temp { // a temporary may be a folder: tables.WriteSet stages a set in one
			if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
				return fmt.Errorf("job: %w", err)
			}
			removed++
		}
	}
	if removed > 0 {
		log(fmt.Sprintf("job: removed %d files of an interrupted wave from %s", removed, dir))
	}
	return nil
}

// partFile reports whether n is a name Run gives a part's table file: part-NNNNN.TABLE.parquet (five
// digits or more, TABLE one of tables.TableNames). pyarrow's part-0.parquet and Spark's
// part-00000-<uuid>.snappy.parquet, which a researcher's own folder may hold, are not.
func partFile(n string) bool {
	rest, ok := strings.CutPrefix(n, "part-")
	if !ok {
		return false
	}
	digits, rest, ok := strings.Cut(rest, ".")
	if !ok || len(digits) < 5 || strings.Trim(digits, "0123456789") != "" {
		return false
	}
	table, ok := strings.CutSuffix(rest, ".parquet")
	return ok && slices.Contains(tables.TableNames, table)
}

// intact reports whether the file at path is the one f records: its size, and its SHA-256 where the
// manifest has one (a part damaged in place keeps its size).
func intact(path string, f File) bool {
	st, err := os.Stat(path)
	if err != nil || st.Size() != f.Bytes {
		return false
	}
	if f.SHA256 == "" {
		return true
	}
	sum, err := FileSHA256(path)
	return err == nil && sum == f.SHA256
}

// FileSHA256 is the hex SHA-256 of the file at path: a part file's, checked on resume and merge, and the
// dataset's (Settings.Dataset).
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("job: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("job: %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Pack cuts items, in order, into waves of at most budget tokens (a longer conversation alone), then
// cuts again any wave the engine's plan would run in more than one read of the weights, so that every
// wave of the job is one pass. It plans every wave before the first runs: a conversation the memory
// budgets cannot hold is refused before any compute. With plan nil it makes the first cut alone, whose
// waves Run's never exceed (the command line sizes a job's results by them before the engine plans).
func Pack(items []Item, budget int, plan func([]int) (replay.WavePlan, error)) ([][]Item, error) {
	var waves [][]Item
	var cur []Item
	tokens := 0
	cut := func(items []Item, budget int) {
		for _, it := range items {
			n := len(it.Sequence.Tokens)
			if len(cur) > 0 && tokens+n > budget {
				waves = append(waves, cur)
				cur, tokens = nil, 0
			}
			cur = append(cur, it)
			tokens += n
		}
		if len(cur) > 0 {
			waves = append(waves, cur)
			cur, tokens = nil, 0
		}
	}
	cut(items, budget)
	if plan == nil {
		return waves, nil
	}
	var out [][]Item
	for _, w := range waves {
		lens := make([]int, len(w))
		for i, it := range w {
			lens[i] = len(it.Sequence.Tokens)
		}
		p, err := plan(lens)
		if err != nil {
			return nil, fmt.Errorf("job: conversation %s: %w", w[0].ID, err)
		}
		if p.Waves <= 1 || len(w) == 1 {
			out = append(out, w)
			continue
		}
		waves = nil
		cut(w, p.WaveTokens)
		out = append(out, waves...)
	}
	return out, nil
}

// runWave replays one wave, writes its part and records it in the manifest.
func runWave(ctx context.Context, eng Engine, cfg Config, m *Manifest, wave []Item) (Part, error) {
	req := replay.Request{Options: cfg.Options, Sequences: make([]replay.Sequence, len(wave))}
	for i, it := range wave {
		req.Sequences[i] = it.Sequence
	}
	res, stats, err := eng.Run(ctx, []replay.Request{req})
	if err != nil {
		return Part{}, err
	}
	results := res[0]
	for i := range results {
		results[i].SeqID = int32(wave[i].Seq) // the seq_id a single replay of the whole dataset gives it
	}
	set, err := tables.Build(results, cfg.Tables)
	if err != nil {
		return Part{}, err
	}
	defer set.Release()
	p := Part{Name: nextPart(m), Files: map[string]File{}, Conversations: len(wave), BytesRead: stats.BytesRead(),
		Seconds: stats.Seconds}
	// A stop (ctx) while the part is written leaves no part and no manifest entry: the wave runs again
	// when the job resumes, rather than the stop waiting for GBs of a part to be written.
	paths, err := tables.WriteSet(ctx, filepath.Join(cfg.Dir, p.Name+".parquet"), set)
	if err != nil {
		return Part{}, err
	}
	for _, t := range set.Tables() {
		path := tables.TablePath(filepath.Join(cfg.Dir, p.Name+".parquet"), t.Name)
		if !slices.Contains(paths, path) {
			return Part{}, fmt.Errorf("job: %s was not written", path)
		}
		st, err := os.Stat(path)
		if err != nil {
			return Part{}, fmt.Errorf("job: %w", err)
		}
		sum, err := FileSHA256(path)
		if err != nil {
			return Part{}, err
		}
		p.Files[t.Name] = File{Path: filepath.Base(path), Bytes: st.Size(), Rows: t.NumRows(), SHA256: sum}
	}
	// The part files are each synced and renamed into place; the directory sync makes the renames
	// durable before the manifest that names them.
	if err := tables.SyncDir(cfg.Dir); err != nil {
		return Part{}, fmt.Errorf("job: %w", err)
	}
	for _, it := range wave {
		p.Tokens += int64(len(it.Sequence.Tokens))
		m.Done[it.ID] = Done{Part: p.Name, SeqID: it.Seq, Tokens: len(it.Sequence.Tokens)}
	}
	p.Finished = time.Now().UTC()
	m.Parts = append(m.Parts, p)
	if err := m.write(cfg.Dir); err != nil {
		return Part{}, err
	}
	return p, nil
}

// partFiles lists the part files (partFile) in dir, at most three of them, for a message.
func partFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	var found []string
	for _, e := range entries {
		if partFile(e.Name()) && len(found) < 3 {
			found = append(found, e.Name())
		}
	}
	return found, nil
}

// lockDir takes the lock on dir's lock file, failing at once when another job holds it. The lock goes with
// the process, kill -9 included, so a crashed job never blocks a resume (off Unix nothing is held: run
// one job a directory).
func lockDir(dir string) (unlock func(), err error) {
	l, err := filelock.Acquire(filepath.Join(dir, LockName), 0o644, false)
	if errors.Is(err, filelock.ErrHeld) {
		return nil, fmt.Errorf("job: %s is in use by another job: one job a directory; give each shard its own", dir)
	}
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	return l.Unlock, nil
}

// nextPart names the part after the highest one in the manifest.
func nextPart(m *Manifest) string {
	n := 0
	for _, p := range m.Parts {
		var k int
		if _, err := fmt.Sscanf(p.Name, "part-%d", &k); err == nil && k+1 > n {
			n = k + 1
		}
	}
	return fmt.Sprintf("part-%05d", n)
}
