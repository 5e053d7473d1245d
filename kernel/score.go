package kernel

import (
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// MessageScore is how probable the model found one chat message's own tokens, teacher-forced.
type MessageScore struct {
	// Sum is the sum of the tokens' logprobs in nats (float32 in the table, added in float64 in position
	// order, as `potato replay` adds them for its summary line).
	Sum float64
	// Mean is Sum / Count, in nats a token; NaN when Count is 0 (a message with empty content).
	Mean float64
	// Count is the number of the message's own tokens, each scored once.
	Count int
}

// MessageLogprob scores message (0-indexed, as the tokens table's message column numbers them) of
// sequence seqID: the sum, mean and count of the logprobs of the message's own tokens.
//
// A message's own tokens are the rows of its message index whose channel is not "structure": the text of
// a system, user or tool message; an assistant message's reasoning (channel think, thinking on), reply
// (response) and tool-call arguments. The chat markup is left out, as `potato replay` leaves it out of
// its per-sequence mean "over the tokens of the messages" (cmd/potato/summary.go), so that the two agree:
// the tags, roles and separators around the text and the end-of-message token are all but certain and
// would pull the mean towards 0. The thinking-effort block (message -1) belongs to no message; the CLI's
// mean counts its text, no MessageLogprob does.
//
// Each token's logprob is on the row that predicts it, the row before it (row pos = t scores the token
// at t+1; README, "Which token a number is about"): a reply's first token is scored on the markup row
// just before it, which is a structure row of the same message. The first token of a sequence is never
// scored (in a conversation it is markup).
//
// It is an error when message is negative, when the result has no sequence seqID, or that sequence no
// message of that index, and after Release.
func (r *Result) MessageLogprob(seqID, message int) (MessageScore, error) {
	if message < 0 {
		return MessageScore{}, fmt.Errorf("kernel: message %d: messages are numbered from 0 (-1 in the table is markup outside every message, and raw text)", message)
	}
	if r.released {
		return MessageScore{}, fmt.Errorf("kernel: the result of job %s was released: its tables are gone (Fetch or replay again)", r.Status.ID)
	}
	c, err := tokenColumns(r.Tokens())
	if err != nil {
		return MessageScore{}, err
	}
	// The rows of the sequence, by position (the engine writes them in order; this does not rely on it).
	var rows []int
	found := false
	for i := 0; i < c.seq.Len(); i++ {
		if int(c.seq.Value(i)) != seqID {
			continue
		}
		p := int(c.pos.Value(i))
		if p < 0 || p > c.seq.Len() {
			return MessageScore{}, fmt.Errorf("kernel: tokens table row %d: position %d out of range", i, p)
		}
		for len(rows) <= p {
			rows = append(rows, -1)
		}
		rows[p] = i
		found = true
	}
	if !found {
		return MessageScore{}, fmt.Errorf("kernel: no sequence %d in the result (%d sequences, seq_id 0..%d)", seqID, r.Status.Sequences, r.Status.Sequences-1)
	}
	var s MessageScore
	last, inMessage := -1, false
	for p, i := range rows {
		if i < 0 {
			return MessageScore{}, fmt.Errorf("kernel: sequence %d: the tokens table has no row for position %d", seqID, p)
		}
		m := int(c.msg.Value(i))
		last = max(last, m)
		if m != message {
			continue
		}
		inMessage = true
		if c.channel.Value(i) == string(tokenizer.ChannelStructure) || p == 0 {
			continue
		}
		prev := rows[p-1] // the row that predicts the token at p
		if c.target.Value(prev) != c.token.Value(i) || c.logprob.IsNull(prev) {
			return MessageScore{}, fmt.Errorf("kernel: sequence %d: row of position %d does not score the token at %d", seqID, p-1, p)
		}
		s.Sum += float64(c.logprob.Value(prev))
		s.Count++
	}
	if !inMessage && last < 0 {
		return MessageScore{}, fmt.Errorf("kernel: sequence %d has no messages: it is raw text or token ids (message -1 on every row), not a conversation", seqID)
	}
	if !inMessage {
		return MessageScore{}, fmt.Errorf("kernel: sequence %d has no message %d (its messages: 0..%d; -1 means none: raw text or token ids)", seqID, message, last)
	}
	s.Mean = math.NaN()
	if s.Count > 0 {
		s.Mean = s.Sum / float64(s.Count)
	}
	return s, nil
}

// tokenCols are the tokens table's columns that MessageLogprob reads.
type tokenCols struct {
	seq, pos, token, msg, target *array.Int32
	channel                      *array.String
	logprob                      *array.Float32
}

// tokenColumns finds the columns of tokens by name, checking their types.
func tokenColumns(tokens arrow.RecordBatch) (tokenCols, error) {
	var c tokenCols
	if tokens == nil {
		return c, fmt.Errorf("kernel: the result has no tokens table (released?)")
	}
	col := func(name string) arrow.Array {
		if idx := tokens.Schema().FieldIndices(name); len(idx) == 1 {
			return tokens.Column(idx[0])
		}
		return nil
	}
	var ok [7]bool
	c.seq, ok[0] = col("seq_id").(*array.Int32)
	c.pos, ok[1] = col("pos").(*array.Int32)
	c.token, ok[2] = col("token_id").(*array.Int32)
	c.msg, ok[3] = col("message").(*array.Int32)
	c.target, ok[4] = col("target_id").(*array.Int32)
	c.channel, ok[5] = col("channel").(*array.String)
	c.logprob, ok[6] = col("logprob").(*array.Float32)
	for i, name := range []string{"seq_id", "pos", "token_id", "message", "target_id", "channel", "logprob"} {
		if !ok[i] {
			return c, fmt.Errorf("kernel: the tokens table has no column %s of its documented type (replay/tables)", name)
		}
	}
	return c, nil
}
