package job_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/datasets/job"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// The test binary doubles as the job process that TestResumeAfterKill kills: with POTATO_JOB_CHILD set
// it runs the tiny job into that directory and exits.
func TestMain(m *testing.M) {
	if dir := os.Getenv("POTATO_JOB_CHILD"); dir != "" {
		j, err := openTinyJob(os.Getenv("POTATO_JOB_MODEL"), dir, job.Shard{0, 1}, 300)
		if err == nil {
			_, err = job.Run(context.Background(), j.eng, j.cfg, j.items)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if tinyDir != "" {
		os.RemoveAll(tinyDir)
	}
	os.Exit(code)
}

// counting wraps an engine and counts the sequences it replays.
type counting struct {
	*replay.Engine
	seqs int
}

func (c *counting) Run(ctx context.Context, reqs []replay.Request) ([][]replay.Result, replay.WaveStats, error) {
	for _, r := range reqs {
		c.seqs += len(r.Sequences)
	}
	return c.Engine.Run(ctx, reqs)
}

// A job killed with SIGKILL in the middle of a wave loses that wave only: the parts its manifest named
// stay as they were, the rerun replays exactly the conversations not in them, the directory ends with
// every conversation once, and the merged tables equal a single run's byte for byte.
func TestResumeAfterKill(t *testing.T) {
	model := tinyModel(t)
	dir := filepath.Join(t.TempDir(), "job")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "POTATO_JOB_CHILD="+dir, "POTATO_JOB_MODEL="+model)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait for two finished parts, then kill: the child is then inside its third wave (of about ten).
	deadline := time.Now().Add(2 * time.Minute)
	var before *job.Manifest
	for time.Now().Before(deadline) {
		if m, err := job.ReadManifest(dir); err == nil && len(m.Parts) >= 2 {
			before = m
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if before == nil {
		t.Fatal("the job wrote no two parts in two minutes")
	}
	// What the manifest says after the kill is what is kept (it may name one part more than we saw).
	killed, err := job.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if killed.Complete {
		t.Fatalf("the job finished before the kill (%d parts): nothing was interrupted", len(killed.Parts))
	}
	kept := map[string][]byte{}
	for _, p := range killed.Parts {
		for _, f := range p.Files {
			data, err := os.ReadFile(filepath.Join(dir, f.Path))
			if err != nil {
				t.Fatal(err)
			}
			kept[f.Path] = data
		}
	}

	j, err := openTinyJob(model, dir, job.Shard{0, 1}, 300)
	if err != nil {
		t.Fatal(err)
	}
	eng := &counting{Engine: j.eng}
	sum, err := job.Run(context.Background(), eng, j.cfg, j.items)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Skipped != len(killed.Done) || eng.seqs != len(j.items)-len(killed.Done) {
		t.Errorf("resume skipped %d and replayed %d conversations; the manifest held %d of %d", sum.Skipped, eng.seqs,
			len(killed.Done), len(j.items))
	}
	for path, data := range kept {
		now, err := os.ReadFile(filepath.Join(dir, path))
		if err != nil || string(now) != string(data) {
			t.Errorf("%s, finished before the kill, changed or went away (%v)", path, err)
		}
	}
	m, err := job.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Complete || len(m.Done) != len(j.items) {
		t.Fatalf("after the resume: complete %v, %d of %d conversations", m.Complete, len(m.Done), len(j.items))
	}
	// No stray files: exactly the manifest's part files, the manifest and the lock.
	names := map[string]bool{job.ManifestName: true, job.LockName: true}
	var rows int64
	for _, p := range m.Parts {
		for table, f := range p.Files {
			names[f.Path] = true
			if table == tables.TokensTable {
				rows += f.Rows
			}
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !names[e.Name()] {
			t.Errorf("stray file %s in the job directory", e.Name())
		}
	}
	var tokens int64
	for _, it := range j.items {
		tokens += int64(len(it.Sequence.Tokens))
	}
	if rows != tokens {
		t.Errorf("the parts hold %d tokens rows, the dataset has %d tokens (a wave twice, or lost)", rows, tokens)
	}
	out := t.TempDir()
	if _, err := job.Merge(context.Background(), filepath.Join(out, "merged.parquet"), []string{dir}, job.MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	singleRun(t, j, filepath.Join(out, "single.parquet"))
	sameFiles(t, filepath.Join(out, "merged.parquet"), filepath.Join(out, "single.parquet"))

	// A part damaged after the fact (its size no longer the manifest's) is dropped and its conversations
	// replayed; nothing else runs again.
	damaged := m.Parts[1]
	f, err := os.OpenFile(filepath.Join(dir, damaged.Files[tables.TokensTable].Path), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("x"))
	f.Close()
	eng.seqs = 0
	var logs []string
	j.cfg.Log = func(s string) { logs = append(logs, s) }
	if _, err := job.Run(context.Background(), eng, j.cfg, j.items); err != nil {
		t.Fatal(err)
	}
	if eng.seqs != damaged.Conversations {
		t.Errorf("after damaging %s (%d conversations) the rerun replayed %d", damaged.Name, damaged.Conversations, eng.seqs)
	}
	if len(logs) == 0 || !strings.Contains(logs[0], damaged.Name+"'s files are missing or changed") {
		t.Errorf("no warning about %s: %q", damaged.Name, logs)
	}
	if _, err := job.Merge(context.Background(), filepath.Join(out, "merged2.parquet"), []string{dir}, job.MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, filepath.Join(out, "merged2.parquet"), filepath.Join(out, "single.parquet"))

	// A part damaged in place (its size unchanged: only its SHA-256 tells) is replayed too, and a staged
	// set a kill left behind (tables.WriteSet's temporary folder, files inside) is removed.
	m, err = job.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	damaged = m.Parts[0]
	path := filepath.Join(dir, damaged.Files[tables.TokensTable].Path)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(data) / 2; i < len(data)/2+16; i++ {
		data[i] ^= 0x5a
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	staged := filepath.Join(dir, ".part-00099.parquet.12345.tmp")
	if err := os.MkdirAll(staged, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(staged, "part-00099.tokens.parquet"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	eng.seqs, logs = 0, nil
	if _, err := job.Run(context.Background(), eng, j.cfg, j.items); err != nil {
		t.Fatal(err)
	}
	if eng.seqs != damaged.Conversations {
		t.Errorf("after damaging %s in place (%d conversations) the rerun replayed %d", damaged.Name, damaged.Conversations, eng.seqs)
	}
	if len(logs) == 0 || !strings.Contains(logs[0], damaged.Name+"'s files are missing or changed") {
		t.Errorf("no warning about %s: %q", damaged.Name, logs)
	}
	if _, err := os.Stat(staged); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the staged folder %s is still there (%v)", staged, err)
	}
	if _, err := job.Merge(context.Background(), filepath.Join(out, "merged3.parquet"), []string{dir}, job.MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, filepath.Join(out, "merged3.parquet"), filepath.Join(out, "single.parquet"))

	// A manifest whose file path leaves the job directory (edited, or copied from elsewhere) is not
	// followed: that part counts as damaged and runs again, and the file outside is not touched.
	// The file outside is a copy of the part's own, so only the path tells them apart.
	m, err = job.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	own, err := os.ReadFile(filepath.Join(dir, m.Parts[2].Files[tables.TokensTable].Path))
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(filepath.Dir(dir), "outside.parquet")
	if err := os.WriteFile(outside, own, 0o644); err != nil {
		t.Fatal(err)
	}
	var escaped job.Part
	editManifest(t, dir, func(m *job.Manifest) {
		escaped = m.Parts[2]
		f := m.Parts[2].Files[tables.TokensTable]
		f.Path = "../outside.parquet"
		m.Parts[2].Files[tables.TokensTable] = f
	})
	eng.seqs = 0
	if _, err := job.Run(context.Background(), eng, j.cfg, j.items); err != nil {
		t.Fatal(err)
	}
	if eng.seqs != escaped.Conversations {
		t.Errorf("a part whose path leaves the directory: the rerun replayed %d conversations, want its %d", eng.seqs, escaped.Conversations)
	}
	if data, err := os.ReadFile(outside); err != nil || string(data) != string(own) {
		t.Errorf("the file outside the job directory changed or went away (%v)", err)
	}
}

// Three shards run apart, merged, equal one run of the whole dataset byte for byte (tokens and lens
// tables); merge refuses a missing shard and a directory of other settings.
func TestShardsMergeEqualsSingleRun(t *testing.T) {
	model := tinyModel(t)
	root := t.TempDir()
	var dirs []string
	seen := map[string]int{}
	for i := 0; i < 3; i++ {
		dir := filepath.Join(root, fmt.Sprintf("shard-%d", i))
		j, err := openTinyJob(model, dir, job.Shard{Index: i, Count: 3}, 700)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := job.Run(context.Background(), j.eng, j.cfg, j.items); err != nil {
			t.Fatal(err)
		}
		m, err := job.ReadManifest(dir)
		if err != nil {
			t.Fatal(err)
		}
		for id := range m.Done {
			seen[id]++
		}
		dirs = append(dirs, dir)
	}
	all, err := openTinyJob(model, "", job.Shard{0, 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range all.items {
		if seen[it.ID] != 1 {
			t.Errorf("conversation %s is in %d shards", it.ID, seen[it.ID])
		}
	}
	if len(seen) != len(all.items) {
		t.Errorf("the shards hold %d conversations, the dataset %d", len(seen), len(all.items))
	}
	out := filepath.Join(root, "merged.parquet")
	if _, err := job.Merge(context.Background(), out, dirs, job.MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	singleRun(t, all, filepath.Join(root, "single.parquet"))
	sameFiles(t, out, filepath.Join(root, "single.parquet"))
	if _, err := os.Stat(tables.TablePath(out, tables.LensTable)); err != nil {
		t.Error("no merged lens table")
	}
	if _, err := job.Merge(context.Background(), filepath.Join(root, "m2.parquet"), dirs[:2], job.MergeOptions{}); err == nil {
		t.Error("merge of two of three shards: no error")
	}
	// A resumed job with another setting is refused with the setting named.
	j, err := openTinyJob(model, dirs[0], job.Shard{Index: 0, Count: 3}, 700)
	if err != nil {
		t.Fatal(err)
	}
	j.cfg.Settings.TopK, j.cfg.Options.TopK = 4, 4
	if _, err := job.Run(context.Background(), j.eng, j.cfg, j.items); err == nil || !strings.Contains(err.Error(), "top_k: 3 -> 4") {
		t.Errorf("resuming with --top-k 4 over a top-k 3 job: %v", err)
	}
	j.cfg.Settings.TopK, j.cfg.Options.TopK = 3, 3
	j.cfg.Shard = job.Shard{Index: 1, Count: 3}
	if _, err := job.Run(context.Background(), j.eng, j.cfg, j.items); err == nil || !strings.Contains(err.Error(), "holds shard 0/3") {
		t.Errorf("shard 1/3 into shard 0/3's directory: %v", err)
	}
}
