package job

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/potato-k3/potato-k3/replay/tables"
)

// ManifestName is the manifest's file name in a job directory.
const ManifestName = "manifest.json"

// LockName is the lock file in a job directory: one job at a time writes there (filelock).
const LockName = ".lock"

// Format is the manifest's "format" field; a reader refuses another one.
const Format = "potato-k3 dataset job 1"

// Manifest is a job directory's record of what is done: the job's settings and key, its shard, and every
// finished part with the conversations it holds. It is rewritten whole and atomically after each wave,
// after that wave's part files are in place, so that whatever a crash leaves, the manifest names only
// complete parts; part files it does not name are an interrupted wave's, and a resumed job deletes them.
type Manifest struct {
	Format   string   `json:"format"`
	Key      string   `json:"key"`
	Settings Settings `json:"settings"`
	Dataset  string   `json:"dataset"` // the path the job was given (informative; its hash is in Settings)
	// Conversations and Tokens are the dataset's (all shards); ShardConversations and ShardTokens this
	// shard's share.
	Conversations      int    `json:"dataset_conversations"`
	Shard              string `json:"shard"` // I/N
	ShardConversations int    `json:"shard_conversations"`
	ShardTokens        int64  `json:"shard_tokens"`
	// Complete is set when every conversation of the shard is in a part.
	Complete bool   `json:"complete"`
	Parts    []Part `json:"parts"`
	// Done maps each finished conversation's id to where its rows are.
	Done map[string]Done `json:"conversations"`
}

// Part is one finished wave: a Parquet file per table, named Name + "." + table + ".parquet".
type Part struct {
	Name          string          `json:"name"` // part-00000, part-00001, ...
	Files         map[string]File `json:"files"`
	Conversations int             `json:"conversations"`
	Tokens        int64           `json:"tokens"`
	BytesRead     int64           `json:"bytes_read"` // weight bytes the wave's pass read
	Seconds       float64         `json:"seconds"`    // the wave's engine time
	Finished      time.Time       `json:"finished"`
}

// File is one table file of a part, with its size and SHA-256 (both checked when a job resumes; a
// manifest written before the digests were recorded has none, and only the size is checked).
type File struct {
	Path   string `json:"path"` // relative to the job directory
	Bytes  int64  `json:"bytes"`
	Rows   int64  `json:"rows"`
	SHA256 string `json:"sha256,omitempty"` // hex
}

// Done is where a finished conversation is: its part and its seq_id (its index in the dataset).
type Done struct {
	Part   string `json:"part"`
	SeqID  int    `json:"seq_id"`
	Tokens int    `json:"tokens"`
}

// ReadManifest reads dir's manifest; the error wraps fs.ErrNotExist when there is none.
func ReadManifest(dir string) (*Manifest, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("job: %s: %w", filepath.Join(dir, ManifestName), err)
	}
	if m.Format != Format {
		return nil, fmt.Errorf("job: %s: format %q, want %q", filepath.Join(dir, ManifestName), m.Format, Format)
	}
	if m.Done == nil {
		m.Done = map[string]Done{}
	}
	return &m, nil
}

// write replaces dir's manifest atomically.
func (m *Manifest) write(dir string) error {
	return writeAtomic(filepath.Join(dir, ManifestName), func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		return enc.Encode(m)
	})
}

// writeAtomic writes path through a temporary file beside it, synced and renamed, and syncs the
// directory (tables.WriteAtomic), so that after a crash path holds the old content or the new, never part
// of either.
func writeAtomic(path string, write func(io.Writer) error) error {
	if err := tables.WriteAtomic(path, write); err != nil {
		return fmt.Errorf("job: %w", err)
	}
	return nil
}
