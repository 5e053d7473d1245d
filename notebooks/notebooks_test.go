package notebooks_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/kernel"
)

var update = flag.Bool("update", false, "write the executed notebooks back over the committed ones")

// h is the harness TestMain prepared; nil with setupErr when the notebooks cannot run here.
var (
	h        *harness
	setupErr error
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(func() int {
		if testing.Short() && os.Getenv(EnvRequire) != "1" {
			setupErr = fmt.Errorf("%w: -short (executing the notebooks takes minutes)", errMissing)
			return m.Run()
		}
		budgetEnd = budgetDeadline(time.Now())
		ctx, cancel := context.WithDeadline(context.Background(), budgetEnd)
		defer cancel()
		var err error
		h, err = newHarness(ctx)
		if made := h; made != nil {
			defer os.RemoveAll(made.tmp)
			defer reap(made.marker) // whatever is left: kernels, cells, engines
			defer kernel.Shutdown() // the engine the last notebook started, if it is still up
		}
		if err != nil {
			h, setupErr = nil, err
		}
		return m.Run()
	}())
}

// budgetEnd is when the notebook runs must be over, leaving go test's -timeout a margin for the cleanup:
// go test kills a test binary that overruns, and a killed binary runs no deferred cleanup, so the GoNB
// kernels and potato serve it started would outlive it.
var budgetEnd time.Time

// budgetDeadline is start plus go test's -timeout (10 minutes by default) less a minute; far ahead when
// the timeout is off (-timeout 0).
func budgetDeadline(start time.Time) time.Time {
	timeout := 10 * time.Minute
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil {
			timeout = d
		}
	}
	if timeout <= 0 {
		return start.Add(24 * time.Hour)
	}
	return start.Add(timeout - time.Minute)
}

// order runs quickstart first: it is the notebook a newcomer opens.
var order = []string{"quickstart.ipynb", "entropy_per_layer.ipynb", "hidden_states.ipynb", "routing_and_attnres.ipynb"}

// maxNotebookBytes bounds a committed notebook: outputs are SVG plots and tables cut to ~20 rows.
const maxNotebookBytes = 400 << 10

// TestNotebooks executes every notebook headless in a fresh kernel and checks its outputs against the
// committed ones: no cell error, every code cell that had output has output of the same kinds, and the
// content each notebook exists to show. With -update it writes the executed notebooks back.
func TestNotebooks(t *testing.T) {
	if setupErr != nil {
		if errors.Is(setupErr, errMissing) && os.Getenv(EnvRequire) != "1" {
			t.Skipf("%v (set %s=1 to make this a failure)", setupErr, EnvRequire)
		}
		t.Fatal(setupErr)
	}
	paths, err := filepath.Glob("*.ipynb")
	if err != nil {
		t.Fatal(err)
	}
	for i := range paths {
		paths[i] = filepath.Base(paths[i])
	}
	slices.SortFunc(paths, func(a, b string) int {
		ia, ib := slices.Index(order, a), slices.Index(order, b)
		if ia < 0 {
			ia = len(order)
		}
		if ib < 0 {
			ib = len(order)
		}
		if ia != ib {
			return ia - ib
		}
		return strings.Compare(a, b)
	})
	for _, name := range order {
		if !slices.Contains(paths, name) {
			t.Errorf("notebook %s is missing", name)
		}
	}
	for _, name := range paths {
		t.Run(strings.TrimSuffix(name, ".ipynb"), func(t *testing.T) { testNotebook(t, name) })
	}
}

// testNotebook executes one notebook and checks it.
func testNotebook(t *testing.T, name string) {
	path, err := filepath.Abs(name)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := readNotebook(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), budgetEnd)
	defer cancel()
	// Each notebook starts its own engine, as it would for a newcomer; nothing it started outlives it.
	defer func() {
		if err := kernel.Shutdown(); err != nil {
			t.Errorf("stopping the engine after %s: %v", name, err)
		}
		if pids := reap(h.marker); len(pids) > 0 {
			t.Logf("stopped %d processes %s left running: %v", len(pids), name, pids)
		}
	}()
	start := time.Now()
	outPath, log, err := h.execute(ctx, path)
	if err != nil {
		if ctx.Err() != nil {
			t.Fatalf("%s did not finish within the test's time budget (go test -timeout less a minute for the cleanup, until %s): %v\n%s",
				name, budgetEnd.Format(time.TimeOnly), err, tail(string(log), 40))
		}
		t.Fatalf("%v\n%s", err, tail(string(log), 40))
	}
	t.Logf("%s executed in %s", name, time.Since(start).Round(100*time.Millisecond))
	// nbconvert's output holds the kernel's standard error: GoNB's log goes to a file (potato notebook
	// install), so the messages it printed at every start must not show.
	for _, noise := range []string{"gopls is not installed", "Error message"} {
		if strings.Contains(string(log), noise) {
			t.Errorf("the kernel printed %q at start (its log should go to gonb.log):\n%s", noise, tail(string(log), 10))
		}
	}
	got, err := readNotebook(outPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Cells) != len(committed.Cells) {
		t.Fatalf("executed notebook has %d cells, committed %d", len(got.Cells), len(committed.Cells))
	}
	failed := false
	for i, c := range got.Cells {
		for _, o := range c.Outputs {
			if o.OutputType == "error" {
				failed = true
				t.Errorf("cell %d failed: %s: %s\n%s\n--- cell output ---\n%s\n--- cell source ---\n%s", i, o.EName, o.EValue,
					stripANSI(strings.Join(o.Traceback, "\n")), c.report(), head(string(c.Source), 12))
			}
			if o.OutputType == "stream" && o.Name == "stderr" {
				t.Logf("cell %d wrote to stderr: %s", i, head(string(o.Text), 10))
			}
		}
	}
	if !*update {
		for i, c := range committed.Cells {
			if c.CellType != "code" || len(c.Outputs) == 0 {
				continue
			}
			if want, have := c.kinds(), got.Cells[i].kinds(); !slices.Equal(want, have) {
				t.Errorf("cell %d: output kinds %v, the committed notebook has %v (refresh it with go test ./notebooks -update if the change is intended)\n--- cell source ---\n%s",
					i, have, want, head(string(c.Source), 12))
			}
		}
	}
	checkContent(t, name, got)
	checkPlots(t, got)
	// nbclient writes the kernel's language_info, whose empty pygments_lexer makes nbconvert highlight
	// Go as Python: name the Go lexer before the notebook is rendered or written back.
	if err := setLanguageInfo(outPath); err != nil {
		t.Fatal(err)
	}
	checkHTML(t, ctx, outPath, got)
	data, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > maxNotebookBytes {
		t.Errorf("executed %s is %d kB, want at most %d kB: the notebooks are committed with their outputs", name, len(data)>>10, maxNotebookBytes>>10)
	}
	if *update && !failed && !t.Failed() {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d kB)", path, len(data)>>10)
	}
}

// want is one thing a notebook must show: at least min outputs of the mime type that contain every string.
type want struct {
	what     string
	mime     string
	contains []string
	min      int
}

// wants lists what each notebook exists to show. Plots are PNG images (plotCells checks each plot
// cell); the text/plain beside each image is its title.
var wants = map[string][]want{
	"quickstart.ipynb": {
		{"engine description", "stdout", []string{"layers", "hidden size", "vocabulary"}, 1},
		{"tokens table", "text/html", []string{"rows ×", "seq_id", "token_id", "channel", "target_id", "logprob", "rank", "entropy", "topk_ids", "topk_tokens", "topk_logprobs", "␣"}, 1},
		{"logprob strip", "text/plain", []string{"Surprise per token"}, 1},
		{"means by channel", "stdout", []string{"mean -logprob", "response"}, 1},
		{"message scores", "stdout", []string{"message 0  user", "message 1  assistant", "logprob sum", "nats a token"}, 1},
	},
	"entropy_per_layer.ipynb": {
		{"lens table", "text/html", []string{"rows ×", "layer", "entropy", "target_rank", "topk_tokens"}, 1},
		{"entropy plots", "text/plain", []string{"Logit-lens entropy"}, 2},
		{"last layer equals the output", "stdout", []string{" 0 differ from the model's output"}, 1},
	},
	"hidden_states.ipynb": {
		{"hidden table", "text/html", []string{"rows ×", "vector", "fixed_size_list&lt;float32&gt;", "‖x‖₂"}, 1},
		{"norm plot", "text/plain", []string{"L2 norm by layer"}, 1},
	},
	"routing_and_attnres.ipynb": {
		{"router table", "text/html", []string{"rows ×", "expert_ids", "expert_weights"}, 1},
		{"attnres table", "text/html", []string{"rows ×", "site", "weights"}, 1},
		{"plots (experts, AttnRes, top-k)", "image/png", nil, 3},
		{"expert counts from Info", "stdout", []string{"16 routed experts per MoE layer, 4 chosen per token"}, 1},
	},
}

// plotCall matches the calls that show a figure in a cell: show(fig) (the notebooks' helper) or a
// Figure's Display method.
var plotCall = regexp.MustCompile(`\bshow\(fig\)|check\(fig\.Display\(\)\)|\.DisplaySVG\(\)`)

// isPlotCell reports whether c shows a plot: a cell with a body (after %%) that calls plotCall. The
// declaration cell that defines show is not one.
func isPlotCell(c cell) bool {
	_, body, ok := strings.Cut(string(c.Source), "%%")
	return c.CellType == "code" && ok && plotCall.MatchString(body)
}

// checkPlots checks that every cell that shows a plot carries it as an image (image/png), which every
// notebook viewer shows, and that no output is an SVG or a plot sent as HTML: Jupyter sanitises the HTML
// of a notebook it does not trust, as a fresh clone is, and GitHub does too, so such a plot collapses
// into its axis text.
func checkPlots(t *testing.T, nb *notebook) {
	t.Helper()
	for i, c := range nb.Cells {
		if c.CellType != "code" {
			continue
		}
		for _, o := range c.Outputs {
			if html, ok := o.text("text/html"); ok && strings.Contains(html, "<svg") {
				t.Errorf("cell %d shows an SVG as HTML, which an untrusted notebook (a fresh clone) reduces to its axis text", i)
			}
		}
		if !isPlotCell(c) {
			continue
		}
		images := 0
		for _, o := range c.Outputs {
			if data, ok := o.Data["image/png"]; ok && len(data) > 100 {
				images++
			}
		}
		if images == 0 {
			t.Errorf("cell %d shows a plot but has no image/png output (kinds %v)\n--- cell source ---\n%s", i, c.kinds(), head(string(c.Source), 12))
		}
	}
}

// checkContent checks nb against wants[name].
func checkContent(t *testing.T, name string, nb *notebook) {
	t.Helper()
	missing := false
	for _, w := range wants[name] {
		n := 0
		for _, c := range nb.Cells {
			for _, o := range c.Outputs {
				if text, ok := o.text(w.mime); ok && containsAll(text, w.contains) {
					n++
				}
			}
		}
		if n < w.min {
			t.Errorf("%s: %d %s outputs hold %q, want at least %d", w.what, n, w.mime, w.contains, w.min)
			missing = true
		}
	}
	if missing { // what the cells did show, to tell a missing output from a changed one
		for i, c := range nb.Cells {
			if c.CellType == "code" {
				t.Logf("cell %d outputs:\n%s", i, head(c.report(), 20))
			}
		}
	}
}

// containsAll reports whether s contains every one of subs.
func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestOnlyTheEngine checks that no notebook reads the model directory the engine reports (Info.ModelDir):
// it is a path on the engine's machine, which with $POTATO_ADDR is another one. The engine names the top-k
// ids (topk_tokens) and reports the model's shape (Info), so a cell needs nothing else. Printing the
// directory's name is fine. This runs without jupyter.
func TestOnlyTheEngine(t *testing.T) {
	paths, err := filepath.Glob("*.ipynb")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		nb, err := readNotebook(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range nb.Cells {
			if c.CellType != "code" {
				continue
			}
			src := strings.ReplaceAll(string(c.Source), "filepath.Base(info.ModelDir)", "")
			for _, bad := range []string{"ModelDir", "tokenizer.Load("} {
				if strings.Contains(src, bad) {
					t.Errorf("%s cell %d uses %s: a notebook talking to an engine on another machine cannot read its files", path, i, bad)
				}
			}
		}
	}
}
