package tables

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// FromRecords turns records of the tokens table back into one Result per sequence, the inverse of the
// tokens part of Build: SeqID, Tokens, Pieces, Messages, Channels, Conversation, Thinking, Targets and
// Stats are filled (Pieces,
// Messages and Channels always have one entry per token; a null logprob or rank becomes 0 as in
// ops.TokenStats). topk_tokens is checked against topk_ids when present but not read back (Build names the
// ids again); a table without it, written before schema version 2, reads as well. Columns are found by
// name, so extra columns and any column order are fine; string and list columns may also be
// large_string/string_view and large_list (what polars or DuckDB write back). Rows may come in any order
// (a query may have shuffled them): sequences are returned in order of first appearance and each
// sequence's positions must be exactly 0..n-1. A sequence without tokens has no rows and so does not come
// back. The results share no memory with recs.
func FromRecords(recs ...arrow.RecordBatch) ([]replay.Result, error) {
	var out []replay.Result
	var pos [][]int32 // per result, the pos of each row as read
	index := map[int32]int{}
	for b, rec := range recs {
		c, err := tokenColumns(rec)
		if err != nil {
			return nil, fmt.Errorf("%w (record %d)", err, b)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			seq := c.seq.Value(i)
			k, ok := index[seq]
			if !ok {
				k = len(out)
				index[seq] = k
				out = append(out, replay.Result{SeqID: seq})
				pos = append(pos, nil)
			}
			r := &out[k]
			if c.conv != nil && c.thinking != nil {
				r.Conversation, r.Thinking = c.conv.Value(i), c.thinking.Value(i)
			}
			pos[k] = append(pos[k], c.pos.Value(i))
			r.Tokens = append(r.Tokens, c.tokenID.Value(i))
			r.Pieces = append(r.Pieces, c.token.Value(i))
			r.Messages = append(r.Messages, c.message.Value(i))
			r.Channels = append(r.Channels, c.channel.Value(i))
			r.Targets = append(r.Targets, c.target.Value(i))
			st := ops.TokenStats{Entropy: c.entropy.Value(i), TopIDs: c.topIDs.Row(i), TopLogp: c.topLogp.Row(i)}
			if c.logprob.IsValid(i) {
				st.Logprob = c.logprob.Value(i)
			}
			if c.rank.IsValid(i) {
				st.Rank = c.rank.Value(i)
			}
			r.Stats = append(r.Stats, st)
		}
	}
	for k := range out {
		r := &out[k]
		perm, err := positionOrder(pos[k])
		if err != nil {
			return nil, fmt.Errorf("tables: tokens: sequence %d: %w", r.SeqID, err)
		}
		if perm != nil {
			r.Tokens, r.Pieces, r.Messages = permute(r.Tokens, perm), permute(r.Pieces, perm), permute(r.Messages, perm)
			r.Channels, r.Targets, r.Stats = permute(r.Channels, perm), permute(r.Targets, perm), permute(r.Stats, perm)
		}
	}
	return out, nil
}

// tokenCols are the tokens table's columns of one record, checked.
type tokenCols struct {
	seq, pos, tokenID, message, target, rank *array.Int32
	token, channel                           stringArray
	conv, thinking                           stringArray // nil in a table before schema version 3
	logprob, entropy                         *array.Float32
	topIDs                                   int32Lists
	topLogp                                  float32Lists
}

// tokenColumns finds and checks every tokens column of rec.
func tokenColumns(rec arrow.RecordBatch) (c tokenCols, err error) {
	const t = TokensTable
	ints := []struct {
		dst      **array.Int32
		name     string
		nullable bool
	}{
		{&c.seq, "seq_id", false}, {&c.pos, "pos", false}, {&c.tokenID, "token_id", false},
		{&c.message, "message", false}, {&c.target, "target_id", false}, {&c.rank, "rank", true},
	}
	for _, f := range ints {
		if *f.dst, err = int32Column(rec, t, f.name, f.nullable); err != nil {
			return c, err
		}
	}
	if c.logprob, err = float32Column(rec, t, "logprob", true); err != nil {
		return c, err
	}
	if c.entropy, err = float32Column(rec, t, "entropy", false); err != nil {
		return c, err
	}
	if c.token, err = stringColumn(rec, t, "token"); err != nil {
		return c, err
	}
	if c.channel, err = stringColumn(rec, t, "channel"); err != nil {
		return c, err
	}
	if c.topIDs, err = int32ListColumn(rec, t, "topk_ids"); err != nil {
		return c, err
	}
	if err = checkPieceLists(rec, t, c.topIDs); err != nil {
		return c, err
	}
	if c.topLogp, err = float32ListColumn(rec, t, "topk_logprobs"); err != nil {
		return c, err
	}
	for _, f := range []struct {
		dst  *stringArray
		name string
	}{{&c.conv, "conversation"}, {&c.thinking, "thinking"}} {
		if rec.Schema().HasField(f.name) {
			if *f.dst, err = stringColumn(rec, t, f.name); err != nil {
				return c, err
			}
		}
	}
	return c, nil
}

// positionOrder checks that pos (the pos column of one sequence's rows, or of one capture's) is a
// permutation of 0..len(pos)-1 and returns perm with perm[t] the row of position t, or nil when the rows
// are already in position order.
func positionOrder(pos []int32) ([]int, error) {
	inOrder := true
	for t, p := range pos {
		if int(p) != t {
			inOrder = false
			break
		}
	}
	if inOrder {
		return nil, nil
	}
	perm := make([]int, len(pos))
	for t := range perm {
		perm[t] = -1
	}
	for row, p := range pos {
		if p < 0 || int(p) >= len(pos) {
			return nil, fmt.Errorf("position %d out of range for %d rows (want positions 0..%d)", p, len(pos), len(pos)-1)
		}
		if perm[p] >= 0 {
			return nil, fmt.Errorf("position %d appears twice", p)
		}
		perm[p] = row
	}
	return perm, nil
}

// permute returns s reordered so that element t is s[perm[t]]; an empty s (a field the table does not
// use) stays empty.
func permute[T any](s []T, perm []int) []T {
	if len(s) == 0 {
		return s
	}
	out := make([]T, len(s))
	for t, row := range perm {
		out[t] = s[row]
	}
	return out
}
