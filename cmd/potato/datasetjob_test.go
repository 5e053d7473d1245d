package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/potato-k3/potato-k3/datasets/job"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// smallDataset writes the first n bundled examples as JSONL, with the ids of every other one dropped
// (those are named by their line) and a blank line in between, and returns its path.
func smallDataset(t *testing.T, n int) string {
	t.Helper()
	f, err := os.Open("../../datasets/examples/examples.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b bytes.Buffer
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for i := 0; i < n && sc.Scan(); i++ {
		line := sc.Bytes()
		if i%2 == 1 {
			var o map[string]json.RawMessage
			if err := json.Unmarshal(line, &o); err != nil {
				t.Fatal(err)
			}
			delete(o, "id")
			line, _ = json.Marshal(o)
		}
		b.Write(line)
		b.WriteString("\n")
		if i == 2 {
			b.WriteString("\n")
		}
	}
	path := filepath.Join(t.TempDir(), "small.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// potato replay --chat DATA --out DIR/ --shard I/3 three times, then potato merge, gives the files of one
// potato replay --out FILE.parquet byte for byte; a rerun replays nothing; ids come from the input, or
// the line.
func TestDatasetJobCLI(t *testing.T) {
	model := tinyModel(t)
	data := smallDataset(t, 6)
	root := t.TempDir()
	common := []string{"replay", "--model", model, "--chat", data, "--thinking", "off", "--top-k", "3", "--no-progress"}
	runOK := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := run(context.Background(), append(append([]string{}, common...), args...), &out); err != nil {
			t.Fatalf("potato %s: %v", strings.Join(args, " "), err)
		}
		return out.String()
	}
	single := filepath.Join(root, "single.parquet")
	runOK("--show", "0", "--out", single)
	var dirs []string
	ids := map[string]bool{}
	for i := 0; i < 3; i++ {
		dir := filepath.Join(root, fmt.Sprintf("shard%d", i)) + "/"
		runOK("--shard", fmt.Sprintf("%d/3", i), "--wave-tokens", "400", "--out", dir)
		dirs = append(dirs, dir)
		m, err := job.ReadManifest(dir)
		if err != nil {
			t.Fatal(err)
		}
		for id := range m.Done {
			ids[id] = true
		}
	}
	for _, want := range []string{"greeting", "line:2", "line:5", "line:7"} { // line 4 is blank
		if !ids[want] {
			t.Errorf("no conversation %q in the manifests (have %v)", want, ids)
		}
	}
	if len(ids) != 6 {
		t.Errorf("the shards hold %d conversations, want 6", len(ids))
	}
	var out bytes.Buffer
	merged := filepath.Join(root, "merged.parquet")
	if err := run(context.Background(), append([]string{"merge", "--out", merged}, dirs...), &out); err != nil {
		t.Fatal(err)
	}
	// The same rows and columns as the single run (each run's tables carry their own result-set id and
	// request hash in the metadata, so the files differ in those bytes).
	for _, table := range []string{"tokens"} {
		a, err := tables.ReadParquet(filepath.Join(root, "merged."+table+".parquet"), memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		b, err := tables.ReadParquet(filepath.Join(root, "single."+table+".parquet"), memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		if !tables.SameRows(a, b) {
			t.Errorf("merged.%s.parquet (%d rows) differs from the single run's (%d rows)", table, a.NumRows(), b.NumRows())
		}
	}
	if got := runOK("--shard", "0/3", "--out", dirs[0]); !strings.Contains(got, "this run 0 waves") {
		t.Errorf("rerun of a finished shard: %q, want no wave", got)
	}
	err := run(context.Background(), append(append([]string{}, common...), "--shard", "0/3", "--out", filepath.Join(root, "x.parquet")), &out)
	if err == nil || !strings.Contains(err.Error(), "--shard needs a dataset job") {
		t.Errorf("--shard with --out FILE: %v", err)
	}
	// another setting that changes results: the manifest's key refuses the directory
	err = run(context.Background(), append(append([]string{}, common[:len(common)-3]...), "--top-k", "4", "--shard", "1/3", "--out", dirs[1]), &out)
	if err == nil || !strings.Contains(err.Error(), "top") {
		t.Errorf("a job directory resumed with --top-k 4: %v", err)
	}
}

// A dataset job applies --max-tokens to each conversation and --max-result-bytes to its largest wave,
// before the first wave: before, "--max-result-bytes 1B --max-tokens 10" said "job complete".
func TestDatasetJobLimits(t *testing.T) {
	model := tinyModel(t)
	data := smallDataset(t, 6)
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"--max-tokens", []string{"--max-tokens", "10"}, "6 conversations have more than 10 tokens: the limit is 10 (--max-tokens): greeting (line 1), line:2, "},
		// a conversation runs in one wave: refused before the first wave (it failed at its own wave,
		// after the waves before it had run)
		{"--max-wave-tokens", []string{"--max-wave-tokens", "100"}, "conversations have more than 100 tokens: the limit is 100 (--max-wave-tokens): greeting (line 1), "},
		{"--max-result-bytes", []string{"--max-result-bytes", "1B", "--wave-tokens", "300"},
			"(0 hidden and 0 lens layers, top-k 3, over the largest wave, "},
		{"--max-result-bytes names the limit", []string{"--max-result-bytes", "1B"},
			"conversations greeting..line:7): the limit is 1 B (--max-result-bytes): ask for fewer layers or a smaller top-k, or lower --wave-tokens"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "job") + "/"
			var out bytes.Buffer
			args := append([]string{"replay", "--model", model, "--chat", data, "--thinking", "off", "--top-k", "3", "--no-progress", "--out", dir}, tt.args...)
			err := run(context.Background(), args, &out)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error: -want …%s… +got %v (%s)", tt.want, err, out.String())
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("the refused job made its directory: %v", err)
			}
		})
	}
}

// A dataset job's waves are the smaller of --wave-tokens and --max-wave-tokens: its summary line and its
// --max-result-bytes check took --wave-tokens alone, so that under --wave-tokens 2000000 the check
// counted every conversation as one wave (and could refuse a job whose waves fit) and the summary said
// "waves of at most 2,000,000 tokens" of waves the engine held to --max-wave-tokens.
func TestDatasetJobWaveBudget(t *testing.T) {
	model := tinyModel(t)
	data := smallDataset(t, 7) // 1,872 tokens; the longest conversation 456
	dir := filepath.Join(t.TempDir(), "job") + "/"
	args := []string{"replay", "--model", model, "--chat", data, "--thinking", "off", "--no-progress", "--out", dir,
		"--wave-tokens", "2000000", "--max-wave-tokens", "500"}
	err := run(context.Background(), append(args, "--max-result-bytes", "1B"), &bytes.Buffer{})
	var tokens int
	if err == nil {
		t.Fatal("--max-result-bytes 1B: accepted")
	}
	if _, after, ok := strings.Cut(err.Error(), "over the largest wave, "); !ok {
		t.Fatalf("the refusal names no wave: %v", err)
	} else if _, err := fmt.Sscanf(strings.ReplaceAll(after, ",", ""), "%d tokens", &tokens); err != nil || tokens > 500 {
		t.Errorf("the largest wave counted %d tokens (%v), want at most --max-wave-tokens 500: %s", tokens, err, after)
	}
	if err := run(context.Background(), args, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	m, err := job.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Parts {
		if p.Tokens > 500 {
			t.Errorf("part %s holds %d tokens: past --max-wave-tokens 500", p.Name, p.Tokens)
		}
	}
}

// A dataset job interrupted after a part says that its parts are kept and the same command resumes it;
// the same command then finishes it without replaying the kept part.
func TestDatasetJobInterrupted(t *testing.T) {
	model := tinyModel(t)
	data := smallDataset(t, 6)
	dir := filepath.Join(t.TempDir(), "job") + "/"
	args := []string{"replay", "--model", model, "--chat", data, "--thinking", "off", "--top-k", "3", "--no-progress",
		"--wave-tokens", "150", "--out", dir}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // the first part written: interrupt, as Ctrl-C does
		for ctx.Err() == nil {
			if m, err := job.ReadManifest(dir); err == nil && len(m.Parts) > 0 {
				cancel()
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	err := run(ctx, args, &bytes.Buffer{})
	if err == nil {
		t.Skip("the job finished before it could be interrupted")
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "the job in "+dir+" was interrupted: its finished parts are kept, and running the same command again resumes it (stopped in: ") ||
		!errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted job: %v (want the resume hint first, the engine's error after it)", err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "job complete") || strings.Contains(out.String(), " 0 conversations skipped") {
		t.Errorf("the rerun did not resume (want some conversations skipped): %s", out.String())
	}
}

// More shards than conversations: the empty shards finish as complete and empty, the merge of every
// shard equals one replay, and a merge of jobs with no finished conversation writes nothing and leaves
// earlier tables alone.
func TestDatasetJobEmptyShards(t *testing.T) {
	model := tinyModel(t)
	data := smallDataset(t, 3)
	root := t.TempDir()
	base := []string{"replay", "--model", model, "--chat", data, "--thinking", "off", "--top-k", "3", "--no-progress"}
	var dirs []string
	empty := 0
	for s := range 6 {
		dir := filepath.Join(root, fmt.Sprintf("s%d", s)) + "/"
		if err := run(context.Background(), append(base, "--shard", fmt.Sprintf("%d/6", s), "--out", dir), &bytes.Buffer{}); err != nil {
			t.Fatalf("shard %d/6: %v", s, err)
		}
		m, err := job.ReadManifest(dir)
		if err != nil || !m.Complete {
			t.Fatalf("shard %d/6: manifest %v, complete %v", s, err, m != nil && m.Complete)
		}
		if len(m.Done) == 0 {
			empty++
		}
		dirs = append(dirs, dir)
	}
	if empty == 0 {
		t.Fatal("no shard of 6 was empty with 3 conversations")
	}
	merged, single := filepath.Join(root, "merged.parquet"), filepath.Join(root, "single.parquet")
	if err := run(context.Background(), append([]string{"merge", "--out", merged}, dirs...), &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), append(base, "--out", single), &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	a, err := tables.ReadSet(merged, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	b, err := tables.ReadSet(single, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	for _, name := range tables.TableNames {
		if ta, tb := a.Table(name), b.Table(name); (ta == nil) != (tb == nil) || (ta != nil && !tables.SameRows(ta, tb)) {
			t.Errorf("%s table: the merge of six shards, some empty, differs from one replay", name)
		}
	}

	// Only the empty shards: nothing to merge, and the earlier merge's tables stay.
	var none []string
	for _, d := range dirs {
		if m, _ := job.ReadManifest(d); len(m.Done) == 0 {
			none = append(none, d)
		}
	}
	before, _ := os.ReadFile(tables.TablePath(merged, tables.TokensTable))
	err = run(context.Background(), append([]string{"merge", "--partial", "--out", merged}, none...), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "hold no finished conversation yet: nothing was written") {
		t.Errorf("merging empty jobs: %v", err)
	}
	if after, _ := os.ReadFile(tables.TablePath(merged, tables.TokensTable)); string(after) != string(before) {
		t.Error("merging empty jobs changed the earlier tables")
	}
}

// potato replay --chat DATA --out DIR/ --plan-only plans what the job would run and writes nothing: every
// conversation in a new directory, what its manifest does not hold in one begun, nothing in one done; a
// directory of another job is refused as the job itself refuses it.
func TestDatasetJobPlanOnly(t *testing.T) {
	model := tinyModel(t)
	data := smallDataset(t, 6)
	dir := filepath.Join(t.TempDir(), "job") + "/"
	common := []string{"replay", "--model", model, "--chat", data, "--thinking", "off", "--top-k", "3", "--no-progress", "--wave-tokens", "400", "--out", dir}
	plan := func(extra ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), append(append(append([]string{}, common...), "--plan-only"), extra...), &out)
		return out.String(), err
	}
	got, err := plan()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, "plan: dataset job of 6 conversations, shard 0/1: ") || !strings.Contains(got, "(--wave-tokens 400)") ||
		!strings.Contains(got, "\nplan: the largest wave: wave ") {
		t.Errorf("plan of a new job:\n%s", got)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("--plan-only made the job's directory: %v", err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), common, &out); err != nil {
		t.Fatal(err)
	}
	if got, err := plan(); err != nil || !strings.Contains(got, "(6 conversations done in "+dir+"): nothing left to run") {
		t.Errorf("plan of a finished job: %v\n%s", err, got)
	}
	// a job begun: one conversation taken out of the manifest runs again
	m, err := job.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, job.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	delete(m.Done, "greeting")
	if doc["conversations"], err = json.Marshal(m.Done); err != nil {
		t.Fatal(err)
	}
	if raw, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, job.ManifestName), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := plan(); err != nil || !strings.Contains(got, "(5 conversations done in "+dir+"): ") || !strings.Contains(got, " in 1 wave ") {
		t.Errorf("plan of a job begun: %v\n%s", err, got)
	}
	if _, err := plan("--top-k", "4"); err == nil || !strings.Contains(err.Error(), "holds a job with other settings") {
		t.Errorf("plan over another job's directory: %v", err)
	}
}

// TestDatasetJobOtherWeights: two checkpoints under one config.json (the tiny preset's weights of seeds 1
// and 2)
// are one job's settings no longer: a shard directory refuses to resume with the other's weights, and
// merge refuses shards of both, naming the weights. Before, only config.json's hash was in the job's key,
// and such shards merged silently.
func TestDatasetJobOtherWeights(t *testing.T) {
	root := t.TempDir()
	models := []string{filepath.Join(root, "seed1"), filepath.Join(root, "seed2")}
	for i, dir := range models {
		if err := run(context.Background(), []string{"synth", "-q", "--preset", "tiny", "--seed", fmt.Sprint(i + 1), "--out", dir}, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
	}
	// synth records its seed in config.json: give the second checkpoint the first's
	cfg, err := os.ReadFile(filepath.Join(models[0], "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(models[1], "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	data := smallDataset(t, 4)
	dirs := []string{filepath.Join(root, "s0") + "/", filepath.Join(root, "s1") + "/"}
	job := func(model string, shard int) error {
		return run(context.Background(), []string{"replay", "--model", model, "--chat", data, "--thinking", "off",
			"--no-progress", "--shard", fmt.Sprintf("%d/2", shard), "--out", dirs[shard]}, &bytes.Buffer{})
	}
	if err := job(models[0], 0); err != nil {
		t.Fatal(err)
	}
	if err := job(models[1], 1); err != nil {
		t.Fatal(err)
	}
	err = run(context.Background(), append([]string{"merge", "--out", filepath.Join(root, "m.parquet")}, dirs...), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "weights_hash") || !strings.Contains(err.Error(), "other weights") {
		t.Errorf("merge of shards of two checkpoints: %v", err)
	}
	if err := job(models[1], 0); err == nil || !strings.Contains(err.Error(), "other weights") {
		t.Errorf("shard 0 resumed with the other checkpoint: %v", err)
	}
}

// A dataset job past its sequence limit names every conversation over it (the first five, then a count)
// by its id and line, or by its line alone, with the flag to raise: it named only the first, without its
// line, so that a file of many long conversations took a run to find each.
func TestDatasetJobTooLong(t *testing.T) {
	model := tinyModel(t)
	conv := func(id string, messages int) string { // one "hello there" message is 17 tokens
		head := `{`
		if id != "" {
			head += `"id": "` + id + `", `
		}
		return head + `"messages": [` + strings.TrimSuffix(strings.Repeat(`{"role": "user", "content": "hello there"}, `, messages), ", ") + "]}\n"
	}
	for _, tt := range []struct {
		name  string
		lines []string
		args  []string
		want  string // the whole error, after "replay: FILE: "
	}{
		{"one, with id, after a blank line", []string{conv("a", 1), "\n", conv("long", 20), conv("", 1)}, []string{"--max-tokens", "100"},
			"conversation long (line 3) has more than 100 tokens: the limit is 100 (--max-tokens); raise --max-tokens, or leave the conversation out of the file"},
		{"one, without id", []string{conv("a", 1), conv("", 20)}, []string{"--max-wave-tokens", "100"},
			"conversation line:2 has more than 100 tokens: the limit is 100 (--max-wave-tokens); raise --max-wave-tokens, or leave the conversation out of the file"},
		{"seven, five named", []string{conv("a", 1), conv("l1", 20), conv("", 20), conv("l3", 20), conv("", 20), conv("l5", 20), conv("l6", 20), conv("", 20)},
			[]string{"--max-tokens", "100"},
			"7 conversations have more than 100 tokens: the limit is 100 (--max-tokens): l1 (line 2), line:3, l3 (line 4), line:5, l5 (line 6) and 2 more; raise --max-tokens, or leave them out of the file"},
		{"only the shard's", []string{conv("a", 20), conv("b", 20), conv("c", 20), conv("d", 20)}, []string{"--max-tokens", "100", "--shard", "1/2"},
			""}, // filled in below: the conversations of shard 1/2 alone
	} {
		t.Run(tt.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "chats.jsonl")
			if err := os.WriteFile(data, []byte(strings.Join(tt.lines, "")), 0o644); err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if want == "" {
				shard, err := job.ParseShard("1/2")
				if err != nil {
					t.Fatal(err)
				}
				var in []string
				for i, id := range []string{"a", "b", "c", "d"} {
					if shard.Has(id) {
						in = append(in, fmt.Sprintf("%s (line %d)", id, i+1))
					}
				}
				if len(in) == 0 || len(in) == 4 {
					t.Fatalf("shard 1/2 holds %d of 4 conversations: choose other ids", len(in))
				}
				want = fmt.Sprintf("%d conversations have more than 100 tokens: the limit is 100 (--max-tokens): %s; raise --max-tokens, or leave them out of the file", len(in), strings.Join(in, ", "))
				if len(in) == 1 {
					want = "conversation " + in[0] + " has more than 100 tokens: the limit is 100 (--max-tokens); raise --max-tokens, or leave the conversation out of the file"
				}
			}
			dir := filepath.Join(t.TempDir(), "job") + "/"
			args := append([]string{"replay", "--model", model, "--chat", data, "--thinking", "off", "--no-progress", "--out", dir}, tt.args...)
			err := run(context.Background(), args, &bytes.Buffer{})
			if want = "replay: " + data + ": " + want; err == nil || err.Error() != want {
				t.Fatalf("error:\n-want %s\n+got  %v", want, err)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("the refused job made its directory: %v", err)
			}
		})
	}
}

// A dataset job's --out that names a file is refused before the model is read, naming it: job.Run's
// mkdir refused it only after, as "job: mkdir results/: file exists".
func TestDatasetJobOutIsFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "results")
	if err := os.WriteFile(file, []byte("notes"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := smallDataset(t, 2)
	for _, out := range []string{file + "/", file} { // a file is no job directory with or without the slash
		t.Run(filepath.Base(out), func(t *testing.T) {
			// a model directory that does not exist: the check comes before the model is opened
			args := []string{"replay", "--model", filepath.Join(dir, "no-model"), "--chat", data, "--thinking", "off", "--no-progress", "--out", out}
			err := run(context.Background(), args, &bytes.Buffer{})
			want := "replay: --out " + out + ": " + file + " is a file, not a directory"
			if out == file {
				want = "--out " + file + " has no extension" // not a directory: a single replay's output file
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error: -want …%s… +got %v", want, err)
			}
			if b, _ := os.ReadFile(file); string(b) != "notes" {
				t.Errorf("the file was changed: %q", b)
			}
		})
	}
}

// A dataset job names a conversation it refuses for its ids or its thinking mode by its id and its line
// (blank lines counted), as it names one past the token limit: a line number in an error is where the
// file is mended, which a count of conversations is not once the file has blank lines.
func TestDatasetJobNamesLines(t *testing.T) {
	model := tinyModel(t)
	const hello = `"messages": [{"role": "user", "content": "hello there"}]`
	for _, tt := range []struct {
		name     string
		lines    []string
		thinking string
		want     string // the whole error, after "replay: FILE: "
	}{
		{"a shared id after a blank line", []string{`{"id": "a", ` + hello + "}\n", "\n", `{"id": "b", ` + hello + "}\n", `{"id": "a", ` + hello + "}\n"}, "off",
			`line 1 and line 4 share the id "a": give each its own, or drop the "id" fields to name conversations by their line, item or row`},
		{"an id that is another's place", []string{`{"id": "line:2", ` + hello + "}\n", `{` + hello + "}\n"}, "off",
			`line 1 and line 2 share the id "line:2": give each its own, or drop the "id" fields to name conversations by their line, item or row`},
		{"no thinking mode, after a blank line", []string{"\n", `{"id": "q", ` + hello + "}\n"}, "",
			`conversation q (line 2) says nothing of thinking mode: give --thinking on|off (the model's output depends on it)`},
		{"the other thinking mode, without id", []string{`{` + hello + `, "thinking": true}` + "\n"}, "off",
			`conversation line:1 says "thinking": true but --thinking is off: remove one of them`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "chats.jsonl")
			if err := os.WriteFile(data, []byte(strings.Join(tt.lines, "")), 0o644); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "job") + "/"
			args := []string{"replay", "--model", model, "--chat", data, "--no-progress", "--out", dir}
			if tt.thinking != "" {
				args = append(args, "--thinking", tt.thinking)
			}
			err := run(context.Background(), args, &bytes.Buffer{})
			if want := "replay: " + data + ": " + tt.want; err == nil || err.Error() != want {
				t.Fatalf("error:\n-want %s\n+got  %v", want, err)
			}
		})
	}
}

// A dataset job is keyed by its file's hash: --chat - (standard input) with --out DIR/ is refused saying
// so, writing nothing (it said "datasets: -: unknown extension", after stdin had been read once already).
func TestDatasetJobStdin(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		w.WriteString(`{"id":"a","thinking":false,"messages":[{"role":"user","content":"hi"}]}` + "\n")
		w.Close()
	}()
	old := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = old; r.Close() }()
	dir := filepath.Join(t.TempDir(), "job") + "/"
	err = run(context.Background(), []string{"replay", "--model", tinyModel(t), "--chat", "-", "--no-progress", "--out", dir}, &bytes.Buffer{})
	if want := "replay: --chat -: a dataset job reads a file"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error: -want …%s… +got %v", want, err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the refused job made its directory: %v", err)
	}
}
