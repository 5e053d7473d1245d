package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/potato-k3/potato-k3/datasets"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// potato replay refuses every mistake it can see before compute, with a message naming it: the output
// path, the inputs, the layer lists, the sizes. The checks that need no model run before the model opens
// (a missing --model would be the error otherwise); the others before anything is replayed (nothing is
// printed, no file is written).
func TestReplayChecksBeforeCompute(t *testing.T) {
	model := tinyModel(t)
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	os.WriteFile(notDir, []byte("x"), 0o644)
	chats := filepath.Join(dir, "chats.jsonl")
	os.WriteFile(chats, datasets.ExamplesJSONL(), 0o644)
	typo := filepath.Join(dir, "typo.jsonl")
	os.WriteFile(typo, []byte(`{"thinking":false,"messages":[{"role":"user","content":"a"}]}`+"\n"+
		`{"thinking":false,"messages":[{"role":"user","contnet":"Hi"}]}`+"\n"), 0o644)
	dup := filepath.Join(dir, "dup.jsonl")
	os.WriteFile(dup, []byte(`{"id":"a","thinking":false,"messages":[{"role":"user","content":"one"}]}`+"\n"+
		`{"id":"b","thinking":false,"messages":[{"role":"user","content":"two"}]}`+"\n"+
		`{"id":"a","thinking":false,"messages":[{"role":"user","content":"three"}]}`+"\n"), 0o644)
	empty := filepath.Join(dir, "empty.jsonl")
	os.WriteFile(empty, []byte("\n"), 0o644)
	big := filepath.Join(dir, "big.txt") // 3 MB of "word ": past --max-tokens (1,048,576) in the tiny vocabulary
	os.WriteFile(big, bytes.Repeat([]byte("word "), 3<<20/5), 0o644)
	emptyText := filepath.Join(dir, "empty.txt")
	os.WriteFile(emptyText, nil, 0o644)
	wide := filepath.Join(dir, "wide.txt") // 64 KiB: more bytes than 3 tokens of the tiny tokenizer can cover
	os.WriteFile(wide, bytes.Repeat([]byte("a"), 64<<10), 0o644)
	out := filepath.Join(dir, "r.arrow")
	os.Mkdir(filepath.Join(dir, "d.lens.arrow"), 0o755)
	before := []struct {
		name string
		args []string
		want string
	}{
		{"missing out directory", []string{"--text", "x", "--out", "/nonexistent/dir/r.arrow"},
			"--out /nonexistent/dir/r.arrow: directory /nonexistent/dir does not exist"},
		{"out extension", []string{"--text", "x", "--out", filepath.Join(dir, "r.csv")},
			`unknown extension ".csv" (want .arrow, .arrows or .parquet)`},
		{"out parent is a file", []string{"--text", "x", "--out", filepath.Join(notDir, "r.arrow")}, "is not a directory"},
		// failed after the replay, at the write: "rename …: file exists"
		{"a table's file is a directory", []string{"--text", "x", "--out", filepath.Join(dir, "d.arrow")},
			"--out " + filepath.Join(dir, "d.arrow") + ": " + filepath.Join(dir, "d.lens.arrow") + " is a directory, where the lens table would be written"},
		// wrote the hidden file .tokens.arrow
		{"out with no name", []string{"--text", "x", "--out", filepath.Join(dir, ".arrow")},
			"--out " + filepath.Join(dir, ".arrow") + ": no file name before the extension (the tables would be hidden files such as .tokens.arrow): give NAME.arrow"},
		{"two inputs", []string{"--text", "x", "--tokens", "1"}, "give exactly one of --text, --text-file, --chat, --tokens"},
		{"negative top-k", []string{"--text", "x", "--top-k", "-1"}, "--top-k -1 is negative"},
		{"thinking without chat", []string{"--text", "x", "--thinking", "on"}, "--thinking is for --chat"},
		{"thinking conflicting with the lines", []string{"--chat", chats, "--thinking", "on"},
			chats + `: conversation greeting (line 1) says "thinking": false but --thinking is on: remove one of them`},
		{"misspelled key", []string{"--chat", typo}, `typo.jsonl line 2: messages[0]: unknown key "contnet"`},
		{"missing text file", []string{"--text-file", filepath.Join(dir, "none.txt")}, "--text-file: open"},
		// An input given as "" read as no input at all ("give exactly one of"); an empty file failed after
		// the engine opened, without its name ("text: it encodes to no tokens").
		{"empty --text", []string{"--text", ""}, "replay: --text is empty: nothing to replay"},
		{"empty --tokens", []string{"--tokens", ""}, "replay: --tokens is empty: nothing to replay"},
		{"empty text file", []string{"--text-file", emptyText}, "replay: --text-file " + emptyText + " is empty: nothing to replay"},
		{"text file a directory", []string{"--text-file", dir}, "replay: --text-file " + dir + " is a directory: give a file of text"},
		{"negative token id", []string{"--tokens", "5,-2"}, "replay: --tokens: token list: -2 is negative: token ids count from 0"},
		{"two conversations of one id", []string{"--chat", dup}, `dup.jsonl: line 1 and line 3 share the id "a"`},
		{"no conversations", []string{"--chat", empty}, "empty.jsonl holds no conversations"},
		{"lens without --out", []string{"--text", "x", "--lens", "1"}, "--lens asks for a table that only --out writes"},
		{"router without --out", []string{"--text", "x", "--router"}, "--router asks for a table that only --out writes"},
		// an --out without an extension is most likely a dataset job's directory: say how one is given
		{"out directory without --chat", []string{"--text", "x", "--out", filepath.Join(dir, "job7") + "/"},
			"job7/ names a directory: that is a dataset job, which replays --chat"},
		{"out without extension with --chat", []string{"--chat", chats, "--out", filepath.Join(dir, "job9")},
			"job9 has no extension: give FILE.arrow, .arrows or .parquet, or for a dataset job its directory as " + filepath.Join(dir, "job9") + "/ (a trailing slash) or an existing directory"},
		{"zero --max-tokens", []string{"--text", "x", "--max-tokens", "0"}, "replay: --max-tokens 0 must be positive"},
		{"zero --max-request-tokens", []string{"--text", "x", "--max-request-tokens", "0"}, "replay: --max-request-tokens 0 must be positive"},
		{"zero --wave-tokens", []string{"--text", "x", "--wave-tokens", "0"}, "replay: --wave-tokens 0 must be positive"},
		{"precision", []string{"--text", "x", "--precision", "fp16"}, `replay: --precision "fp16": want bf16 or fp32`},
		{"plan-only with --out", []string{"--text", "x", "--plan-only", "--out", out}, "replay: --plan-only computes and writes nothing, and --out does not change the plan: drop it"},
		{"plan-only with --lens", []string{"--text", "x", "--plan-only", "--lens", "1"}, "--lens does not change the plan"},
		{"backend", []string{"--text", "x", "--backend", "tpu"}, `replay: --backend "tpu": want cpu or cuda`},
	}
	if os.Getuid() != 0 { // root writes anywhere
		ro := filepath.Join(dir, "ro")
		os.Mkdir(ro, 0o555)
		before = append(before, struct {
			name string
			args []string
			want string
		}{"read-only out directory", []string{"--text", "x", "--out", filepath.Join(ro, "r.arrow")},
			"directory " + ro + " is not writable: permission denied"})
	}
	for _, tt := range before {
		t.Run(tt.name, func(t *testing.T) {
			var stdout bytes.Buffer
			err := run(context.Background(), append([]string{"replay", "--model", filepath.Join(dir, "no-model")}, tt.args...), &stdout)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error: -want …%s… +got %v", tt.want, err)
			}
		})
	}
	withModel := []struct {
		name string
		args []string
		want string
	}{
		{"repeated lens layer", []string{"--text", "x", "--lens", "1,1", "--out", out},
			`--lens: layer list "1,1": layer 1 appears twice (give each layer once)`},
		{"range and repeat", []string{"--text", "x", "--lens", "0-7,3", "--out", out}, `layer 3 appears twice`},
		{"hidden outside", []string{"--text", "x", "--hidden", "8", "--out", out}, "layer 8 outside 0..7"},
		{"top-k past the vocabulary", []string{"--text", "x", "--top-k", "4000"}, "--top-k 4000 is past the vocabulary (3328 ids)"},
		{"text past --max-tokens", []string{"--text", "one two three four five six", "--max-tokens", "3"},
			"replay: the text has more than 3 tokens: the limit is 3 (--max-tokens)"},
		{"3 MB text", []string{"--text-file", big}, "--text-file " + big + " has more than 1048576 tokens: the limit is 1048576 (--max-tokens)"},
		// refused by its size, unread: a file of many GB was read whole before being refused, or ended the
		// process out of memory
		{"text file past what --max-tokens can cover", []string{"--text-file", wide, "--max-tokens", "3"},
			"--text-file " + wide + " has more than 3 tokens: the limit is 3 (--max-tokens): its 65536 bytes are more than 3 tokens of at most"},
		{"token id past the vocabulary", []string{"--tokens", "5,3328"},
			"replay: --tokens: position 1: token id 3328 outside the vocabulary 0..3327"},
		{"conversation past --max-wave-tokens", []string{"--chat", chats, "--max-wave-tokens", "20"},
			`conversation 1 (id "greeting") has`},
		{"tokens past --max-tokens", []string{"--tokens", "1,2,3", "--max-tokens", "2"}, "--tokens has 3 tokens: the limit is 2 (--max-tokens)"},
		// --text and --tokens are the request's one sequence: --max-request-tokens bounds them too (it
		// was enforced for --chat only)
		{"tokens past --max-request-tokens", []string{"--tokens", "1,2,3", "--max-request-tokens", "2"}, "--tokens has 3 tokens: the limit is 2 (--max-request-tokens)"},
		{"text past --max-request-tokens", []string{"--text", "one two three four five six", "--max-request-tokens", "3"},
			"replay: the text has more than 3 tokens: the limit is 3 (--max-request-tokens)"},
		{"results past --max-result-bytes", []string{"--text", "one two three", "--hidden", "all", "--max-result-bytes", "10kB", "--out", out},
			"in memory (8 hidden and 0 lens layers, top-k 0, over every token): the limit is 10.0 kB (--max-result-bytes)"},
		{"conversations past --max-request-tokens", []string{"--chat", chats, "--max-request-tokens", "300"},
			"tokens: the limit is 300 (--max-request-tokens)"},
	}
	for _, tt := range withModel {
		t.Run(tt.name, func(t *testing.T) {
			var stdout bytes.Buffer
			start := time.Now()
			err := run(context.Background(), append([]string{"replay", "--model", model, "--no-progress"}, tt.args...), &stdout)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error: -want …%s… +got %v", tt.want, err)
			}
			if strings.Contains(stdout.String(), "sequence 0") {
				t.Errorf("refused after a replay:\n%s", stdout.String())
			}
			if _, err := os.Stat(tables.TablePath(out, tables.TokensTable)); err == nil {
				t.Errorf("a table was written")
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("refused after %v", d)
			}
		})
	}
}

// --text-file FILE, --text-file - and --text give the same replay; --chat - reads JSONL from stdin.
func TestReplayTextFileAndStdin(t *testing.T) {
	model := tinyModel(t)
	dir := t.TempDir()
	text := "The capital of France is Paris.\nUne phrase en français.\n"
	file := filepath.Join(dir, "t.txt")
	os.WriteFile(file, []byte(text), 0o644)
	replayOut := func(stdin string, args ...string) string {
		t.Helper()
		if stdin != "" {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			go func() { w.WriteString(stdin); w.Close() }()
			old := os.Stdin
			os.Stdin = r
			defer func() { os.Stdin = old; r.Close() }()
		}
		var stdout bytes.Buffer
		if err := run(context.Background(), append([]string{"replay", "--model", model, "--no-progress"}, args...), &stdout); err != nil {
			t.Fatalf("potato replay %v: %v", args, err)
		}
		// the first line names the model and the time taken
		_, rest, _ := strings.Cut(stdout.String(), "\n")
		return rest
	}
	want := replayOut("", "--text", text)
	if got := replayOut("", "--text-file", file); got != want {
		t.Errorf("--text-file:\n-want %s\n+got  %s", want, got)
	}
	if got := replayOut(text, "--text-file", "-"); got != want {
		t.Errorf("--text-file -:\n-want %s\n+got  %s", want, got)
	}
	lines := string(datasets.ExamplesJSONL())
	lines = lines[:strings.Index(lines, "\n")+1]
	chat := filepath.Join(dir, "c.jsonl")
	os.WriteFile(chat, []byte(lines), 0o644)
	if a, b := replayOut("", "--chat", chat), replayOut(lines, "--chat", "-"); a != b || !strings.Contains(a, "sequence 0") {
		t.Errorf("--chat -:\n-want %s\n+got  %s", a, b)
	}
	// stdin is read only up to what --max-tokens can cover, and an empty one is refused
	for _, tt := range []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"past the limit", strings.Repeat("a", 64<<10), []string{"--max-tokens", "3"},
			"replay: --text-file - (stdin) has more than 3 tokens: the limit is 3 (--max-tokens): it holds more than"},
		{"empty", "", nil, "replay: --text-file - is empty: nothing to replay"},
	} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		go func() { w.WriteString(tt.stdin); w.Close() }()
		old := os.Stdin
		os.Stdin = r
		var stdout bytes.Buffer
		err = run(context.Background(), append([]string{"replay", "--model", model, "--no-progress", "--text-file", "-"}, tt.args...), &stdout)
		os.Stdin = old
		r.Close()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: -want …%s… +got %v", tt.name, tt.want, err)
		}
	}
}

// The printed table shows the Arrow tokens table's rows: at pos t the logprob and rank of target_id
// (the token at t+1), the entropy at t; the last position has none.
func TestReplayPrintedRowsMatchArrow(t *testing.T) {
	model := tinyModel(t)
	out := filepath.Join(t.TempDir(), "r.arrow")
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"replay", "--model", model, "--no-progress", "--text",
		"The capital of France is", "--top-k", "2", "--out", out}, &stdout); err != nil {
		t.Fatal(err)
	}
	tab, err := tables.ReadFile(tables.TablePath(out, tables.TokensTable), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tab.Release()
	rec := tab.Records[0]
	idx := func(name string) int { return rec.Schema().FieldIndices(name)[0] }
	lp := rec.Column(idx("logprob")).(*array.Float32)
	rank := rec.Column(idx("rank")).(*array.Int32)
	ent := rec.Column(idx("entropy")).(*array.Float32)
	if !strings.Contains(stdout.String(), "next (target)  logprob(next)  rank(next)") {
		t.Errorf("headings do not say which token is scored:\n%s", stdout.String())
	}
	row := regexp.MustCompile(`(?m)^(\d+)\s+"[^"]*"\s+text\s+(?:"[^"]*"\s+(-?[0-9.]+)\s+(\d+)\s+)?(-?[0-9.]+)\s`)
	rows := row.FindAllStringSubmatch(stdout.String(), -1)
	if len(rows) != int(rec.NumRows()) {
		t.Fatalf("printed %d rows, the table holds %d:\n%s", len(rows), rec.NumRows(), stdout.String())
	}
	for _, m := range rows {
		pos, _ := strconv.Atoi(m[1])
		wantLP, wantRank := "", ""
		if lp.IsValid(pos) {
			wantLP, wantRank = fmt.Sprintf("%.3f", lp.Value(pos)), fmt.Sprint(rank.Value(pos))
		}
		if m[2] != wantLP || m[3] != wantRank || m[4] != fmt.Sprintf("%.3f", ent.Value(pos)) {
			t.Errorf("pos %d printed logprob %q rank %q entropy %s; Arrow row %d: %q %q %.3f",
				pos, m[2], m[3], m[4], pos, wantLP, wantRank, ent.Value(pos))
		}
	}
}

// Every table of a run carries the provenance keys; two runs get two result-set ids and, for the same
// request, one request hash; the tokens table names the conversation and its thinking mode.
func TestReplayResultSetProvenance(t *testing.T) {
	model := tinyModel(t)
	dir := t.TempDir()
	chats := filepath.Join(dir, "chats.jsonl")
	lines := strings.SplitAfter(string(datasets.ExamplesJSONL()), "\n")
	os.WriteFile(chats, []byte(lines[0]+strings.Replace(lines[1], `"id":"why-sky-blue",`, "", 1)), 0o644)
	meta := func(out string) []map[string]string {
		t.Helper()
		var stdout bytes.Buffer
		if err := run(context.Background(), []string{"replay", "--model", model, "--no-progress", "--chat", chats,
			"--lens", "0,7", "--out", out}, &stdout); err != nil {
			t.Fatal(err)
		}
		set, err := tables.ReadSet(out, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer set.Release()
		var mds []map[string]string
		for _, tab := range set.Tables() {
			mds = append(mds, tab.Schema.Metadata().ToMap())
		}
		rec := set.Tokens.Records[0]
		conv := rec.Column(rec.Schema().FieldIndices("conversation")[0]).(*array.String)
		thinking := rec.Column(rec.Schema().FieldIndices("thinking")[0]).(*array.String)
		if conv.Value(0) != "greeting" || conv.Value(conv.Len()-1) != "line:2" || thinking.Value(0) != "off" {
			t.Errorf("conversation %q..%q, thinking %q: want greeting..line:2 (its line), off", conv.Value(0), conv.Value(conv.Len()-1), thinking.Value(0))
		}
		return mds
	}
	a, b := meta(filepath.Join(dir, "a.parquet")), meta(filepath.Join(dir, "b.arrow"))
	if len(a) != 2 || len(b) != 2 {
		t.Fatalf("tables: %d and %d, want tokens and lens", len(a), len(b))
	}
	for _, md := range append(a, b...) {
		for _, k := range tables.ProvenanceKeys {
			if md[k] == "" {
				t.Errorf("table %s lacks %s", md[tables.MetaTable], k)
			}
		}
	}
	if a[0][tables.MetaResultSet] != a[1][tables.MetaResultSet] || a[0][tables.MetaResultSet] == b[0][tables.MetaResultSet] {
		t.Errorf("result sets: run 1 %s %s, run 2 %s: want one id a run, two runs apart",
			a[0][tables.MetaResultSet], a[1][tables.MetaResultSet], b[0][tables.MetaResultSet])
	}
	if a[0][tables.MetaRequestHash] != b[0][tables.MetaRequestHash] {
		t.Errorf("one request, two hashes: %s, %s", a[0][tables.MetaRequestHash], b[0][tables.MetaRequestHash])
	}
}

// potato replay --plan-only prints the plan of the replay's waves, from the same planner as a replay's
// own plan line, and replays nothing.
func TestReplayPlanOnly(t *testing.T) {
	model := tinyModel(t)
	chats := filepath.Join(t.TempDir(), "chats.jsonl")
	if err := os.WriteFile(chats, datasets.ExamplesJSONL(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"text", []string{"--tokens", "1,2,3,4,5,6,7"}, "plan: wave 7 tokens (1 sequence, longest 7) in 1 read"},
		{"conversations", []string{"--chat", chats}, " sequences, longest "},
		{"several reads", []string{"--chat", chats, "--device-memory", "4MB", "--host-memory", "5MB"}, " reads (waves of at most "},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout bytes.Buffer
			args := append([]string{"replay", "--model", model, "--no-progress", "--plan-only"}, c.args...)
			if err := run(context.Background(), args, &stdout); err != nil {
				t.Fatalf("%v\n%s", err, stdout.String())
			}
			out := stdout.String()
			if !strings.HasPrefix(out, "plan: wave ") || !strings.Contains(out, c.want) || strings.Count(out, "\n") != 1 {
				t.Errorf("want one plan line with %q, got:\n%s", c.want, out)
			}
		})
	}
}
