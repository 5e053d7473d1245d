package notebooks_test

import (
	"encoding/json"
	"fmt"
	"html"
	"os"
	"regexp"
	"slices"
	"strings"
)

// notebook is the part of an .ipynb file (nbformat 4) the test reads.
type notebook struct {
	Cells []cell `json:"cells"`
}

// cell is one notebook cell.
type cell struct {
	CellType string    `json:"cell_type"`
	Source   multiline `json:"source"`
	Outputs  []output  `json:"outputs"`
}

// output is one output of a code cell: a stream (Name, Text), display_data or execute_result (Data by
// mime type) or an error (EName, EValue, Traceback).
type output struct {
	OutputType string                     `json:"output_type"`
	Name       string                     `json:"name"`
	Text       multiline                  `json:"text"`
	Data       map[string]json.RawMessage `json:"data"`
	EName      string                     `json:"ename"`
	EValue     string                     `json:"evalue"`
	Traceback  []string                   `json:"traceback"`
}

// multiline is a notebook text field: a string, or a list of strings to concatenate.
type multiline string

func (m *multiline) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		*m = multiline(s)
		return nil
	}
	var parts []string
	if err := json.Unmarshal(data, &parts); err != nil {
		return fmt.Errorf("want a string or a list of strings, got %.40s", data)
	}
	*m = multiline(strings.Join(parts, ""))
	return nil
}

// readNotebook reads the notebook at path.
func readNotebook(path string) (*notebook, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var nb notebook
	if err := json.Unmarshal(data, &nb); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &nb, nil
}

// kinds are the kinds of a cell's outputs, sorted: "stdout" for standard output, and the mime types of
// displayed data (text/html, image/svg+xml, image/png...). Standard error is left out: a cold module
// cache may make go print download lines there. Errors are reported on their own.
func (c cell) kinds() []string {
	var ks []string
	for _, o := range c.Outputs {
		switch o.OutputType {
		case "stream":
			if o.Name == "stdout" {
				ks = append(ks, "stdout")
			}
		case "display_data", "execute_result":
			for mime := range o.Data {
				ks = append(ks, mime)
			}
		}
	}
	slices.Sort(ks)
	return slices.Compact(ks)
}

// text is the output's text for kind ("stdout", "stderr" or a mime type), and whether it has that kind.
func (o output) text(kind string) (string, bool) {
	if o.OutputType == "stream" {
		return string(o.Text), o.Name == kind
	}
	raw, ok := o.Data[kind]
	if !ok {
		return "", false
	}
	var m multiline
	if err := json.Unmarshal(raw, &m); err != nil {
		return string(raw), true // JSON data (application/json): its text is enough to search
	}
	return string(m), true
}

// report is the text of a cell's outputs other than errors, tags stripped, for a failure message: GoNB
// shows a compile error as HTML, with the error output itself saying only "exit status 1".
func (c cell) report() string {
	var b strings.Builder
	for _, o := range c.Outputs {
		for _, kind := range []string{"stdout", "stderr", "text/plain", "text/html"} {
			if text, ok := o.text(kind); ok && strings.TrimSpace(text) != "" {
				if kind == "text/html" {
					text = html.UnescapeString(tags.ReplaceAllString(styles.ReplaceAllString(text, ""), " "))
				}
				fmt.Fprintf(&b, "[%s] %s\n", kind, strings.TrimSpace(stripANSI(text)))
			}
		}
	}
	return head(b.String(), 40)
}

// tags matches HTML tags, styles the style sheets GoNB puts before an error.
var (
	tags   = regexp.MustCompile(`<[^>]*>`)
	styles = regexp.MustCompile(`(?s)<style.*?</style>`)
)

// head is the first n lines of s.
func head(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, "\n")
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ansi matches the terminal colour codes GoNB puts in error tracebacks.
var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

// stripANSI removes terminal colour codes from s.
func stripANSI(s string) string { return ansi.ReplaceAllString(s, "") }
