package notebooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// EnvHTMLDir names a directory to keep the HTML exports in, for a look in a browser.
const EnvHTMLDir = "POTATO_NOTEBOOK_HTML"

// goLanguageInfo is the language metadata the notebooks carry: GoNB reports an empty pygments_lexer and
// codemirror_mode, with which nbconvert's HTML export highlights Go as Python and Jupyter's editor does
// not highlight at all.
var goLanguageInfo = map[string]any{"pygments_lexer": "go", "codemirror_mode": "go"}

// setLanguageInfo sets goLanguageInfo in the metadata of the notebook at path, keeping the rest as
// nbformat writes it (one-space indent, sorted keys, no ASCII escapes).
func setLanguageInfo(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var nb map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // numbers stay as written
	if err := dec.Decode(&nb); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	meta, _ := nb["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		nb["metadata"] = meta
	}
	info, _ := meta["language_info"].(map[string]any)
	if info == nil {
		info = map[string]any{"name": "go"}
		meta["language_info"] = info
	}
	for k, v := range goLanguageInfo {
		info[k] = v
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(nb); err != nil {
		return err
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}

// embeddedPNG matches an image nbconvert embedded in the HTML.
var embeddedPNG = regexp.MustCompile(`<img src="data:image/png;base64,[A-Za-z0-9+/=]{100,}"`)

// checkHTML renders the executed notebook at path to HTML with nbconvert, as someone sharing it would,
// and checks the page: every plot cell's image embedded as a PNG, no error or standard-error output,
// and the code highlighted as Go. The page is kept beside the executed notebook.
func checkHTML(t *testing.T, ctx context.Context, path string, nb *notebook) {
	t.Helper()
	args := append(h.nbconvert[1:], "--to", "html", "--output-dir", filepath.Dir(path), path)
	if out, err := h.run(ctx, filepath.Dir(path), h.nbconvert[0], args...); err != nil {
		t.Errorf("nbconvert --to html: %v\n%s", err, tail(string(out), 20))
		return
	}
	page, err := os.ReadFile(strings.TrimSuffix(path, ".ipynb") + ".html")
	if err != nil {
		t.Error(err)
		return
	}
	plots := 0
	for _, c := range nb.Cells {
		if isPlotCell(c) {
			plots++
		}
	}
	if got := len(embeddedPNG.FindAll(page, -1)); got < plots {
		t.Errorf("HTML export: %d embedded PNG images, want one for each of the %d plot cells", got, plots)
	}
	// Outputs carry their mime type in a double-quoted attribute; the page's style sheet names the same
	// types in single-quoted selectors.
	if bytes.Contains(page, []byte(`data-mime-type="application/vnd.jupyter.stderr"`)) {
		t.Errorf("HTML export shows an error or standard-error output")
	}
	if bytes.Contains(page, []byte(`data-mime-type="image/svg+xml"`)) {
		t.Errorf("HTML export has an SVG output, whose elements nbconvert strips")
	}
	if dir := os.Getenv(EnvHTMLDir); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(strings.TrimSuffix(path, ".ipynb")+".html")), page, 0o644); err != nil {
			t.Error(err)
		}
	}
	// Every notebook declares func check; Go's lexer marks func as a declaration keyword, Python's as a name.
	if !bytes.Contains(page, []byte(`<span class="kd">func</span>`)) {
		t.Errorf("HTML export does not highlight the code as Go: check the notebook's language_info")
	}
}

// TestNotebooksPinned checks, without running anything, what keeps the notebooks offline and readable:
// the first code cell turns GoNB's auto-get off, no cell fetches modules or tools itself, and the
// language metadata names Go. TestNotebooks runs the cells with GOPROXY=off, so that a cell that would
// fetch a module fails.
func TestNotebooksPinned(t *testing.T) {
	paths, err := filepath.Glob("*.ipynb")
	if err != nil {
		t.Fatal(err)
	}
	fetch := regexp.MustCompile(`(?m)^\s*[!%].*\bgo (get|install|mod download)\b|^\s*%autoget\b`)
	for _, path := range paths {
		nb, err := readNotebook(path)
		if err != nil {
			t.Fatal(err)
		}
		first := true
		for i, c := range nb.Cells {
			if c.CellType != "code" {
				continue
			}
			if first && !regexp.MustCompile(`(?m)^%noautoget\s*$`).MatchString(string(c.Source)) {
				t.Errorf("%s: the first code cell (%d) lacks %%noautoget: GoNB would run go get after every cell", path, i)
			}
			first = false
			if fetch.MatchString(string(c.Source)) {
				t.Errorf("%s cell %d fetches modules or tools", path, i)
			}
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Metadata struct {
				LanguageInfo map[string]any `json:"language_info"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(data, &meta); err != nil {
			t.Fatal(err)
		}
		for k, v := range goLanguageInfo {
			if meta.Metadata.LanguageInfo[k] != v {
				t.Errorf("%s: language_info.%s = %v, want %v (nbconvert highlights Go as Python otherwise)", path, k, meta.Metadata.LanguageInfo[k], v)
			}
		}
	}
}
