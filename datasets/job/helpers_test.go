package job_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/potato-k3/potato-k3/datasets"
	"github.com/potato-k3/potato-k3/datasets/job"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/synth"
	"github.com/potato-k3/potato-k3/replay/tables"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// tinyJob is the bundled examples on the tiny model, ready to run as a job.
type tinyJob struct {
	eng   *replay.Engine
	items []job.Item
	cfg   job.Config
}

// writeTiny writes the tiny synthetic model into dir.
func writeTiny(dir string) error {
	_, err := synth.Write(context.Background(), dir, synth.Options{Preset: "tiny", Seed: 1})
	return err
}

// openTinyJob opens the tiny model at model and prepares the bundled examples (thinking off) as a job
// into dir, in waves of at most waveTokens tokens.
func openTinyJob(model, dir string, shard job.Shard, waveTokens int) (*tinyJob, error) {
	eng, _, err := replay.Open(context.Background(), model, cpu.New(cpu.Options{Precision: ops.BF16}), replay.EngineOptions{})
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.Load(model)
	if err != nil {
		return nil, err
	}
	entries, err := datasets.LoadEntries("../examples/examples.jsonl")
	if err != nil {
		return nil, err
	}
	j := &tinyJob{eng: eng}
	for i, e := range entries {
		c := e.Conversation
		if c.Thinking == tokenizer.ThinkingUnset {
			c.Thinking = tokenizer.ThinkingOff
		}
		if !shard.Has(e.Name()) {
			continue
		}
		s, err := replay.FromConversation(tok, c)
		if err != nil {
			return nil, err
		}
		j.items = append(j.items, job.Item{ID: e.Name(), Seq: i, Sequence: s})
	}
	opts := replay.Options{TopK: 3, Lens: []int{1, 7}}
	j.cfg = job.Config{Dir: dir, Dataset: "examples.jsonl", DatasetSize: len(entries), Shard: shard, WaveTokens: waveTokens,
		Options: opts,
		Settings: job.Settings{Dataset: "examples", ConfigHash: eng.ConfigSHA256, Engine: replay.Version, Precision: "bf16",
			Backend: "cpu", Thinking: "off", TopK: opts.TopK, Lens: opts.Lens},
		Tables: tables.Options{Piece: tok.Piece, Metadata: map[string]string{tables.MetaConfigHash: eng.ConfigSHA256, tables.MetaWeightsHash: eng.WeightsSHA256}},
	}
	return j, nil
}

// singleRun replays every item of j in one call and writes the tables as out (FILE.parquet), as `potato
// replay --out` would.
func singleRun(t *testing.T, j *tinyJob, out string) {
	t.Helper()
	req := replay.Request{Options: j.cfg.Options}
	for _, it := range j.items {
		req.Sequences = append(req.Sequences, it.Sequence)
	}
	res, _, err := j.eng.Run(context.Background(), []replay.Request{req})
	if err != nil {
		t.Fatal(err)
	}
	set, err := tables.Build(res[0], j.cfg.Tables)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Release()
	if _, err := tables.WriteSet(t.Context(), out, set); err != nil {
		t.Fatal(err)
	}
}

// sameFiles fails unless every table file of want exists in got with the same bytes.
func sameFiles(t *testing.T, got, want string) {
	t.Helper()
	for _, name := range tables.TableNames {
		w, err := os.ReadFile(tables.TablePath(want, name))
		if os.IsNotExist(err) {
			if _, err := os.Stat(tables.TablePath(got, name)); err == nil {
				t.Errorf("%s exists, the single run has no %s table", tables.TablePath(got, name), name)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		g, err := os.ReadFile(tables.TablePath(got, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(g) != string(w) {
			t.Errorf("%s (%d bytes) differs from the single run's %s (%d bytes)", tables.TablePath(got, name), len(g),
				filepath.Base(tables.TablePath(want, name)), len(w))
		}
	}
}

// tinyModel writes the tiny model once per test binary.
var tinyDir string

func tinyModel(t *testing.T) string {
	t.Helper()
	if tinyDir == "" {
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("potato-job-test-%d", os.Getpid()))
		if err := writeTiny(dir); err != nil {
			t.Fatal(err)
		}
		tinyDir = dir
	}
	return tinyDir
}
