package datasets_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/datasets"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// LoadEntries reads what Load reads, in order, and names a conversation by its id, else by its line
// (blank lines counted) or item.
func TestLoadEntries(t *testing.T) {
	dir := t.TempDir()
	jsonl := filepath.Join(dir, "c.jsonl")
	os.WriteFile(jsonl, []byte(`{"id":"a","messages":[{"role":"user","content":"x"}]}

[{"role":"user","content":"y"}]
{"id":7,"messages":[{"role":"user","content":"z"}]}
`), 0o644)
	array := filepath.Join(dir, "c.json")
	os.WriteFile(array, []byte(`[{"messages":[{"role":"user","content":"x"}]},{"id":"b","messages":[{"role":"user","content":"y"}]}]`), 0o644)
	for _, tt := range []struct {
		path string
		want []string
	}{
		{jsonl, []string{"a", "line:3", "7"}},
		{array, []string{"item:1", "b"}},
	} {
		entries, err := datasets.LoadEntries(tt.path)
		if err != nil {
			t.Fatal(err)
		}
		convs, err := datasets.Load(tt.path)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != len(tt.want) || len(convs) != len(entries) {
			t.Fatalf("%s: %d entries, %d conversations, want %d", tt.path, len(entries), len(convs), len(tt.want))
		}
		for i, e := range entries {
			if e.Name() != tt.want[i] || e.Conversation.Messages[0].Content != convs[i].Messages[0].Content {
				t.Errorf("%s entry %d: %q (%q), want %q (%q)", tt.path, i, e.Name(), e.Conversation.Messages[0].Content,
					tt.want[i], convs[i].Messages[0].Content)
			}
		}
	}
	if _, err := datasets.LoadEntries(filepath.Join(dir, "missing.jsonl")); err == nil {
		t.Error("a missing file: no error")
	}
}

// TestCheckEntryIDs: entries sharing a name are refused naming both places (line, item or row, blank
// lines counted), a name like "line:3" included.
func TestCheckEntryIDs(t *testing.T) {
	entry := func(id, unit string, n int) datasets.Entry {
		return datasets.Entry{Conversation: tokenizer.Conversation{ID: id}, Unit: unit, N: n}
	}
	for _, tt := range []struct {
		entries []datasets.Entry
		want    string // "" for no error
	}{
		{nil, ""},
		{[]datasets.Entry{entry("a", "line", 1), entry("", "line", 3)}, ""},
		{[]datasets.Entry{entry("a", "line", 1), entry("b", "line", 4), entry("a", "line", 7)}, `line 1 and line 7 share the id "a"`},
		{[]datasets.Entry{entry("line:3", "line", 1), entry("", "line", 3)}, `line 1 and line 3 share the id "line:3"`},
		{[]datasets.Entry{entry("x", "row", 2), entry("x", "row", 5)}, `row 2 and row 5 share the id "x"`},
	} {
		err := datasets.CheckEntryIDs(tt.entries)
		if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CheckEntryIDs(%v) = %v, want %q", tt.entries, err, tt.want)
		}
	}
}

func TestCheckIDs(t *testing.T) {
	for _, tt := range []struct {
		ids  []string
		want string // "" for no error
	}{
		{nil, ""},
		{[]string{"a", "b", "line:3"}, ""},
		{[]string{"a", "b", "a"}, `conversations 1 and 3 (counted from 1) share the id "a"`},
		{[]string{"x", "y", "y", "x"}, `conversations 2 and 3 (counted from 1) share the id "y"`},
	} {
		err := datasets.CheckIDs(tt.ids)
		if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CheckIDs(%q) = %v, want %q", tt.ids, err, tt.want)
		}
	}
}
