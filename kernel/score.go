package kernel

import (
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// MessageScore is how probable the model found a run of tokens, teacher-forced: one chat message's own
// (MessageLogprob), or a span of positions (SpanLogprob).
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
	c, rows, err := r.sequenceRows(seqID)
	if err != nil {
		return MessageScore{}, err
	}
	var s MessageScore
	last, inMessage := -1, false
	for p, i := range rows {
		m := int(c.msg.Value(i))
		last = max(last, m)
		if m != message {
			continue
		}
		inMessage = true
		if c.channel.Value(i) == string(tokenizer.ChannelStructure) || p == 0 {
			continue
		}
		if err := s.add(c, rows, seqID, p); err != nil {
			return MessageScore{}, err
		}
	}
	if !inMessage && last < 0 {
		return MessageScore{}, fmt.Errorf("kernel: sequence %d has no messages: it is raw text or token ids (message -1 on every row), not a conversation", seqID)
	}
	if !inMessage {
		return MessageScore{}, fmt.Errorf("kernel: sequence %d has no message %d (its messages: 0..%d; -1 means none: raw text or token ids)", seqID, message, last)
	}
	s.mean()
	return s, nil
}

// SpanLogprob scores the tokens at positions from..to-1 of sequence seqID (a word of raw text, a phrase,
// a message's tail): the sum, mean and count of their logprobs, each on the row that predicts it (the
// row before it, as MessageLogprob). A word is often several tokens (" banana" is four in the demo
// model's vocabulary): find its positions in the tokens rows (plotting.TokenRows: Pos and Token), and
// score them together here. Position 0 is never scored, so from is at least 1; to is at most the
// sequence's length. It is an error outside those bounds, for a sequence the result does not have, and
// after Release.
func (r *Result) SpanLogprob(seqID, from, to int) (MessageScore, error) {
	if r.released {
		return MessageScore{}, fmt.Errorf("kernel: the result of job %s was released: its tables are gone (Fetch or replay again)", r.Status.ID)
	}
	c, rows, err := r.sequenceRows(seqID)
	if err != nil {
		return MessageScore{}, err
	}
	if from < 1 || to > len(rows) || from >= to {
		return MessageScore{}, fmt.Errorf("kernel: SpanLogprob(%d, %d, %d): want 1 <= from < to <= %d, the positions of sequence %d's tokens after its first (position 0 is never scored)",
			seqID, from, to, len(rows), seqID)
	}
	var s MessageScore
	for p := from; p < to; p++ {
		if err := s.add(c, rows, seqID, p); err != nil {
			return MessageScore{}, err
		}
	}
	s.mean()
	return s, nil
}

// add adds the logprob of the token at position p, from the row before it.
func (s *MessageScore) add(c tokenCols, rows []int, seqID, p int) error {
	prev := rows[p-1] // the row that predicts the token at p
	if c.target.Value(prev) != c.token.Value(rows[p]) || c.logprob.IsNull(prev) {
		return fmt.Errorf("kernel: sequence %d: row of position %d does not score the token at %d", seqID, p-1, p)
	}
	s.Sum += float64(c.logprob.Value(prev))
	s.Count++
	return nil
}

// mean sets Mean from Sum and Count.
func (s *MessageScore) mean() {
	s.Mean = math.NaN()
	if s.Count > 0 {
		s.Mean = s.Sum / float64(s.Count)
	}
}

// sequenceRows finds the tokens table's columns and the rows of sequence seqID by position (the engine
// writes them in order; this does not rely on it). Every position of the sequence must have its row.
func (r *Result) sequenceRows(seqID int) (tokenCols, []int, error) {
	c, err := tokenColumns(r.Tokens())
	if err != nil {
		return c, nil, err
	}
	var rows []int
	found := false
	for i := 0; i < c.seq.Len(); i++ {
		if int(c.seq.Value(i)) != seqID {
			continue
		}
		p := int(c.pos.Value(i))
		if p < 0 || p > c.seq.Len() {
			return c, nil, fmt.Errorf("kernel: tokens table row %d: position %d out of range", i, p)
		}
		for len(rows) <= p {
			rows = append(rows, -1)
		}
		rows[p] = i
		found = true
	}
	if !found {
		return c, nil, fmt.Errorf("kernel: no sequence %d in the result (%d sequences, seq_id 0..%d)", seqID, r.Status.Sequences, r.Status.Sequences-1)
	}
	for p, i := range rows {
		if i < 0 {
			return c, nil, fmt.Errorf("kernel: sequence %d: the tokens table has no row for position %d", seqID, p)
		}
	}
	return c, rows, nil
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
