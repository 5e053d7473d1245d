package checkpoint

import (
	"bytes"
	"fmt"
	"strings"
)

// File names of a checkpoint directory.
const (
	// IndexFile maps each tensor of a sharded checkpoint to its shard.
	IndexFile = "model.safetensors.index.json"
	// SingleFile is the one shard of an unsharded checkpoint, which has no index.
	SingleFile = "model.safetensors"
)

// Index is a parsed model.safetensors.index.json.
type Index struct {
	// TotalSize is metadata.total_size, or -1 when absent. Writers compute it differently (bytes or
	// parameters, with or without padding), so Open reports it in the Summary but does not enforce it.
	TotalSize int64
	Entries   []IndexEntry // weight_map in file order
	Shards    []string     // distinct shard names in order of first appearance
}

// IndexEntry is one weight_map entry: a tensor and the shard file that holds it.
type IndexEntry struct {
	Name string
	File string
}

// ParseIndex parses an index document. Shard names must be plain file names in the same directory (no
// path separators, not "." or ".."): an index must not make the reader open files elsewhere. Errors are
// *FileError wrapping ErrIndex. Duplicate tensor names are left to Open, which sees the shards too.
func ParseIndex(data []byte) (*Index, error) {
	bad := func(tensor, format string, args ...any) error {
		return &FileError{File: IndexFile, Tensor: tensor, Msg: fmt.Sprintf(format, args...), Kind: ErrIndex}
	}
	idx := &Index{TotalSize: -1}
	s := scanner{data: data}
	n := bytes.Count(data, []byte(`":`)) // about one per entry: a capacity hint
	idx.Entries = make([]IndexEntry, 0, n)
	var (
		names    = make([]byte, 0, len(data)/2) // arena, as in Header.parse
		ends     = make([]int, 0, n)
		sawMeta  bool
		sawMap   bool
		shardIDs = map[string]string{} // interns shard names: 96 strings, not 497,220
	)
	err := s.object(func(key []byte) error {
		switch string(key) {
		case "metadata":
			if sawMeta {
				return s.errorf("duplicate metadata")
			}
			sawMeta = true
			return s.object(func(k []byte) error {
				if string(k) != "total_size" {
					return s.skip(1)
				}
				v, err := s.uint()
				if err != nil {
					return fmt.Errorf("metadata.total_size: %w", err)
				}
				idx.TotalSize = v
				return nil
			})
		case "weight_map":
			if sawMap {
				return s.errorf("duplicate weight_map")
			}
			sawMap = true
			return s.object(func(name []byte) error {
				names = append(names, name...)
				ends = append(ends, len(names))
				file, err := s.str()
				if err != nil {
					return fmt.Errorf("weight_map value: %w", err)
				}
				f, ok := shardIDs[string(file)]
				if !ok {
					f = string(file)
					if why := plainNameProblem(f); why != "" {
						return bad(string(names[len(names)-len(name):]), "shard %q %s", f, why)
					}
					shardIDs[f] = f
					idx.Shards = append(idx.Shards, f)
				}
				idx.Entries = append(idx.Entries, IndexEntry{File: f})
				return nil
			})
		default:
			return s.skip(1)
		}
	})
	if err == nil {
		err = s.end()
	}
	if err != nil {
		if fe, ok := err.(*FileError); ok {
			return nil, fe
		}
		return nil, bad("", "%v", err)
	}
	if !sawMap {
		return nil, bad("", "no weight_map")
	}
	arena := string(names)
	start := 0
	for i, end := range ends {
		idx.Entries[i].Name = arena[start:end]
		start = end
	}
	return idx, nil
}

// plainNameProblem says why name is not a plain file name, or returns "".
func plainNameProblem(name string) string {
	switch {
	case name == "":
		return "is empty"
	case name == "." || name == "..":
		return "is not a file name"
	case strings.ContainsAny(name, `/\`):
		return "is a path, want a plain file name"
	case strings.ContainsRune(name, 0):
		return "contains a NUL byte"
	}
	return ""
}
