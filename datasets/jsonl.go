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

// MaxLineBytes is the longest JSONL line ReadJSONL accepts (a conversation with long tool outputs can be
// megabytes; a line longer than this is more likely a file that is not JSONL).
const MaxLineBytes = 64 << 20

// ReadJSONL reads one conversation per line from r. name is the file name used in errors. Blank lines are
// skipped. Each line is an object {"messages": [...], "id", "thinking", "thinking_effort",
// "add_generation_prompt"} or a bare array of messages; see the package documentation for the message
// shape. The first invalid line stops the read with an *Error naming name, the line and the field.
func ReadJSONL(r io.Reader, name string) ([]tokenizer.Conversation, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	var convs []tokenizer.Conversation
	line := 0
	for sc.Scan() {
		line++
		data := bytes.TrimSpace(sc.Bytes())
		if len(data) == 0 {
			continue
		}
		c, err := parseConversation(data)
		if err != nil {
			return nil, locate(err, name, "line", line)
		}
		convs = append(convs, c)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, locate(fmt.Errorf("line longer than %d bytes", MaxLineBytes), name, "line", line+1)
		}
		return nil, fmt.Errorf("datasets: reading %s: %w", name, err)
	}
	return convs, nil
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

// Load reads conversations from path, by its extension: .jsonl (or .json, read as JSONL) with LoadJSONL,
// .parquet with LoadParquet.
func Load(path string) ([]tokenizer.Conversation, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".jsonl", ".json", ".ndjson":
		return LoadJSONL(path)
	case ".parquet", ".pq":
		return LoadParquet(path)
	default:
		return nil, fmt.Errorf("datasets: %s: unknown extension %q (want .jsonl or .parquet)", path, ext)
	}
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
