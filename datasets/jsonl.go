package datasets

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// MaxLineBytes is the longest JSONL line ReadJSONL accepts (a conversation with long tool outputs can be
// megabytes; a line longer than this is more likely a file that is not JSONL).
const MaxLineBytes = 64 << 20

// ReadJSONL reads one conversation per line from r. name is the file name used in errors. Blank lines are
// skipped, and so is a UTF-8 byte-order mark at the start of r (as editors on Windows save UTF-8); one at
// the start of a later line is an error. A conversation without an "id" gets its line number (1-based) as its ID, so that results can
// name it; ReadJSON gives the item number, ReadParquet the row number. Each line is an object {"messages": [...], "id", "thinking", "thinking_effort",
// "add_generation_prompt"} or a bare array of messages; see the package documentation for the message
// shape. The first invalid line stops the read with an *Error naming name, the line and the field.
func ReadJSONL(r io.Reader, name string) ([]tokenizer.Conversation, error) {
	entries, err := readJSONLEntries(r, name)
	if err != nil {
		return nil, err
	}
	return Conversations(entries), nil
}

// LoadJSONL reads the JSONL file at path (see ReadJSONL).
func LoadJSONL(path string) ([]tokenizer.Conversation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("datasets: %w", err)
	}
	defer f.Close()
	return ReadJSONL(f, path)
}

// ReadJSON reads a JSON array whose items are conversations in any shape a JSONL line may have (an
// object with "messages", or an array of messages), as a pretty-printed .json dataset holds them. Errors
// count items from 1 ("item 3"). A UTF-8 byte-order mark at the start of r is skipped.
func ReadJSON(r io.Reader, name string) ([]tokenizer.Conversation, error) {
	br := bufio.NewReader(r)
	if head, _ := br.Peek(len(utf8BOM)); bytes.Equal(head, utf8BOM) { // the file's byte-order mark
		br.Discard(len(utf8BOM))
	}
	var items []json.RawMessage
	if err := json.NewDecoder(br).Decode(&items); err != nil {
		return nil, &Error{File: name, Err: fmt.Errorf("want a JSON array of conversations: %w", err)}
	}
	convs := make([]tokenizer.Conversation, len(items))
	for i, item := range items {
		var err error
		if convs[i], err = parseConversation(item); err != nil {
			return nil, locate(err, name, "item", i+1)
		}
		if convs[i].ID == "" {
			convs[i].ID = "item:" + strconv.Itoa(i+1)
		}
	}
	return convs, nil
}

// Load reads conversations from path, by its extension: .jsonl or .ndjson with ReadJSONL; .json with
// ReadJSON when the file is one JSON array of conversations, else as JSONL; .parquet with LoadParquet.
func Load(path string) ([]tokenizer.Conversation, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".jsonl", ".ndjson":
		return LoadJSONL(path)
	case ".json":
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("datasets: %w", err)
		}
		data = bytes.TrimPrefix(data, utf8BOM)
		if isArrayOfConversations(data) {
			return ReadJSON(bytes.NewReader(data), path)
		}
		return ReadJSONL(bytes.NewReader(data), path)
	case ".parquet", ".pq":
		return LoadParquet(path)
	default:
		return nil, fmt.Errorf("datasets: %s: unknown extension %q (want .jsonl, .ndjson, .json or .parquet)", path, ext)
	}
}

// isArrayOfConversations reports whether data is one JSON array whose first item is itself a
// conversation (an object with "messages", or an array), rather than a single line holding a bare array
// of messages, whose items are messages.
func isArrayOfConversations(data []byte) bool {
	var items []json.RawMessage
	if json.Unmarshal(data, &items) != nil || len(items) == 0 {
		return false
	}
	first := bytes.TrimSpace(items[0])
	if len(first) > 0 && first[0] == '[' {
		return true
	}
	var o map[string]json.RawMessage
	if json.Unmarshal(first, &o) != nil {
		return false
	}
	_, ok := o["messages"]
	return ok
}

// SetThinking sets the thinking mode of every conversation that does not say (ThinkingUnset) to t, and
// returns how many it set. The engine refuses an unset mode because the model's output depends on it; a
// dataset without a "thinking" field needs the caller to choose once for all of it.
func SetThinking(convs []tokenizer.Conversation, t tokenizer.Thinking) int {
	n := 0
	for i := range convs {
		if convs[i].Thinking == tokenizer.ThinkingUnset {
			convs[i].Thinking = t
			n++
		}
	}
	return n
}
