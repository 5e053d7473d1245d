package datasets

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// Entry is one conversation of a dataset file with where it was read from, so that a conversation
// without an "id" can still be named stably (a dataset job keys its manifest and its shards by it).
type Entry struct {
	Conversation tokenizer.Conversation
	Unit         string // "line" (JSONL), "item" (a JSON array) or "row" (Parquet), as in *Error
	N            int    // the 1-based line, item or row number
}

// Name is the conversation's id when it has one, else its place in the file: "line:12", "item:3",
// "row:7" (counted from 1, as errors count them).
func (e Entry) Name() string {
	if e.Conversation.ID != "" {
		return e.Conversation.ID
	}
	return fmt.Sprintf("%s:%d", e.Unit, e.N)
}

// Conversations returns the entries' conversations, each without an id named by its place (Name:
// "line:12"), as Load names them: the tables' conversation column.
func Conversations(entries []Entry) []tokenizer.Conversation {
	convs := make([]tokenizer.Conversation, len(entries))
	for i, e := range entries {
		convs[i] = e.Conversation
		convs[i].ID = e.Name()
	}
	return convs
}

// CheckIDs refuses a dataset in which two conversations share a name (ids, in file order, as Name gives
// them or as Load leaves Conversation.ID): their rows could not be told apart in the tables, and a dataset
// job, whose manifest and shards go by name, would replay one twice or count it done once.
func CheckIDs(ids []string) error {
	if j, i, ok := sharedName(len(ids), func(i int) string { return ids[i] }); ok {
		return fmt.Errorf("conversations %d and %d (counted from 1) share the id %q: %s", j+1, i+1, ids[i], ownIDs)
	}
	return nil
}

// CheckEntryIDs is CheckIDs for entries (as LoadEntries gives them), naming the two places that share a
// name by their line, item or row, so that a file with blank lines or a Parquet file is mended where the
// message points.
func CheckEntryIDs(entries []Entry) error {
	if j, i, ok := sharedName(len(entries), func(i int) string { return entries[i].Name() }); ok {
		f, e := entries[j], entries[i]
		return fmt.Errorf("%s %d and %s %d share the id %q: %s", f.Unit, f.N, e.Unit, e.N, e.Name(), ownIDs)
	}
	return nil
}

// ownIDs is what CheckIDs and CheckEntryIDs advise.
const ownIDs = `give each its own, or drop the "id" fields to name conversations by their line, item or row`

// sharedName finds the first i whose name(i) an earlier j (the first with it) has too, of n names.
func sharedName(n int, name func(int) string) (j, i int, ok bool) {
	seen := make(map[string]int, n)
	for i := range n {
		s := name(i)
		if j, ok := seen[s]; ok {
			return j, i, true
		}
		seen[s] = i
	}
	return 0, 0, false
}

// LoadEntries reads the conversations of path as Load does, in the same order, each with the line
// (JSONL, blank lines counted), item (JSON array) or row (Parquet) it came from.
func LoadEntries(path string) ([]Entry, error) {
	ext := strings.ToLower(filepath.Ext(path))
	if ext == ".jsonl" || ext == ".ndjson" {
		return loadJSONLEntries(path)
	}
	if ext == ".json" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("datasets: %w", err)
		}
		data = bytes.TrimPrefix(data, utf8BOM)
		if !isArrayOfConversations(data) {
			return readJSONLEntries(bytes.NewReader(data), path)
		}
	}
	convs, err := Load(path)
	if err != nil {
		return nil, err
	}
	unit := "row"
	if ext == ".json" {
		unit = "item"
	}
	out := make([]Entry, len(convs))
	for i, c := range convs {
		out[i] = Entry{Conversation: c, Unit: unit, N: i + 1}
	}
	return out, nil
}

func loadJSONLEntries(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("datasets: %w", err)
	}
	defer f.Close()
	return readJSONLEntries(f, path)
}

// readJSONLEntries reads JSONL as ReadJSONL documents, keeping each conversation's line number (and
// leaving the ids the file does not give empty); ReadJSONL is built on it.
func readJSONLEntries(r io.Reader, name string) ([]Entry, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	var out []Entry
	line := 0
	for sc.Scan() {
		line++
		data := sc.Bytes()
		if line == 1 { // a byte-order mark (Notepad's UTF-8) marks the file's encoding; it is not text of the line
			data = bytes.TrimPrefix(data, utf8BOM)
		}
		data = bytes.TrimSpace(data)
		if len(data) == 0 {
			continue
		}
		c, err := parseConversation(data)
		if err != nil {
			return nil, locate(err, name, "line", line)
		}
		out = append(out, Entry{Conversation: c, Unit: "line", N: line})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, locate(fmt.Errorf("line longer than %d bytes", MaxLineBytes), name, "line", line+1)
		}
		return nil, fmt.Errorf("datasets: reading %s: %w", name, err)
	}
	return out, nil
}
