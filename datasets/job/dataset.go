package job

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/potato-k3/potato-k3/replay"
)

// Item is one conversation of a job: its name (the "id" of the input, or its line or row), its place in
// the dataset, and its tokens.
type Item struct {
	ID string
	// Seq is the conversation's 0-based index in the whole dataset: the seq_id that a single `potato
	// replay` of the dataset gives its rows, which a job's parts keep, whatever the shard or wave.
	Seq      int
	Sequence replay.Sequence
}

// Shard is the part I of N of a dataset that one job takes: the conversations whose id hashes to I
// (ShardOf). The zero Shard and 0/1 are the whole dataset.
type Shard struct{ Index, Count int }

// ParseShard reads "I/N" with 0 <= I < N ("" is 0/1).
func ParseShard(s string) (Shard, error) {
	if s == "" {
		return Shard{0, 1}, nil
	}
	i, n, ok := strings.Cut(s, "/")
	index, err1 := strconv.Atoi(strings.TrimSpace(i))
	count, err2 := strconv.Atoi(strings.TrimSpace(n))
	if !ok || err1 != nil || err2 != nil || count < 1 || index < 0 || index >= count {
		return Shard{}, fmt.Errorf("job: shard %q: want I/N with 0 <= I < N, such as 0/4", s)
	}
	return Shard{index, count}, nil
}

// String writes the shard as I/N.
func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.Index, max(s.Count, 1)) }

// Has reports whether the conversation named id belongs to the shard.
func (s Shard) Has(id string) bool { return s.Count <= 1 || ShardOf(id, s.Count) == s.Index }

// ShardOf is the shard, of n, that the conversation named id belongs to: the first 8 bytes of the
// SHA-256 of the id, big-endian, modulo n. It depends on the id alone (not on the file's order, the
// machine or the Go version), so N jobs given the same dataset cover it exactly once.
func ShardOf(id string, n int) int {
	if n <= 1 {
		return 0
	}
	sum := sha256.Sum256([]byte(id))
	return int(binary.BigEndian.Uint64(sum[:8]) % uint64(n))
}
