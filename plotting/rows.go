package plotting

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
)

// The plain rows each plot takes. A notebook gets them from the engine's Arrow tables with the *Rows
// functions below, which read columns by name; a test or another tool can build them directly.

// TokenRow is one position of a replayed sequence, from the tokens table. The prediction fields
// (TargetID, Logprob, Rank, Entropy, TopK*) are about the next token: row p says how well the model,
// having read tokens 0..p, predicted token p+1.
type TokenRow struct {
	SeqID, Pos int32
	TokenID    int32
	// Token is the text piece of TokenID as the table holds it: the tokenizer's display form
	// (replay/tokenizer DisplayBytes), where a newline is the two characters \n, a tab \t, a backslash \\
	// and a byte that is not valid UTF-8 <0xE4>; a special token is its name. The strips draw what the
	// escapes stand for.
	Token string
	// Message is the index among the conversation's messages of the message the token is part of, its
	// chat markup included; -1 for a token of no message (the thinking-effort message, the generation
	// prompt), raw text and token ids. Select one turn's tokens by SeqID (or Conversation) and Message.
	Message int32
	// Channel is the part of the conversation token TokenID belongs to, one of the tokenizer's Channel
	// values: structure (the chat markup), system, user, think (the reasoning of a thinking reply),
	// response, tool_call, tool (a tool's result), text for raw text; "" for token ids or a table without
	// the column. Row p's prediction is about token p+1, whose channel is the next row's.
	Channel string
	// Conversation is the id of the conversation the sequence was rendered from (the input's id, else its
	// place in the file: line:12, item:3) and Thinking its thinking mode, "on" or "off"; both "" for text
	// and token ids, and for tables written before these columns (schema version 3).
	Conversation, Thinking string
	TargetID               int32 // the next token; -1 at the last position
	// TargetToken is the text piece of TargetID (display form as Token), from the next row of the
	// sequence; "" at the last position, or where the rows were read without that next row.
	TargetToken  string
	Logprob      float64 // log-probability of TargetID; NaN at the last position
	Rank         int32   // rank of TargetID among all tokens, 1 = top; -1 at the last position
	Entropy      float64 // of the next-token distribution, nats; NaN when the table has no entropy column
	TopKIDs      []int32 // the most likely next tokens, most likely first
	TopKLogprobs []float64
	TopKTokens   []string // the text pieces of TopKIDs (topk_tokens, display form as Token); empty when the engine had no tokenizer
}

// LensRow is one logit-lens readout: the next-token distribution read from the output of Layer at
// position Pos, from the lens table. As in the tokens table, the target is the token at Pos+1.
type LensRow struct {
	SeqID, Pos, Layer int32
	Entropy           float64 // nats
	TargetLogprob     float64 // log-probability of the token at Pos+1 under this layer's readout; NaN at the last position
	TargetRank        int32   // its rank among all tokens, 1 = top; -1 at the last position
}

// RouterRow is the experts one token was routed to in one MoE layer, from the router table.
type RouterRow struct {
	SeqID, Pos, Layer int32
	ExpertIDs         []int32   // in selection order
	ExpertWeights     []float64 // the weight applied to each chosen expert's output, same order and length
}

// AttnResRow is the AttnRes mixing weights of one sublayer input at one position, from the attnres table:
// a softmax over the block vectors so far followed by the partial sum of the current block, so
// len(Weights) is the number of completed blocks plus one.
type AttnResRow struct {
	SeqID, Pos, Layer int32
	Site              string // "attn", "mlp" or "output"
	Weights           []float64
}

// TokenRows reads the tokens table. Required columns: seq_id, pos, token_id, token, message, target_id,
// logprob, rank. Optional: channel, entropy, topk_ids, topk_logprobs, topk_tokens, conversation, thinking
// (their fields stay "", NaN or empty when absent; a topk_tokens list is either empty or as long as
// topk_ids). Every table the engine has written has message; conversation and thinking came with schema
// version 3, so older tables lack them.
func TokenRows(recs ...arrow.RecordBatch) ([]TokenRow, error) {
	var rows []TokenRow
	for _, rec := range recs {
		const t = "tokens"
		seq, err1 := intColumn(rec, t, "seq_id")
		pos, err2 := intColumn(rec, t, "pos")
		id, err3 := intColumn(rec, t, "token_id")
		tok, err4 := stringColumn(rec, t, "token")
		target, err5 := intColumn(rec, t, "target_id")
		lp, err6 := floatColumn(rec, t, "logprob")
		rank, err7 := intColumn(rec, t, "rank")
		msg, err8 := intColumn(rec, t, "message")
		if err := firstError(err1, err2, err3, err4, err5, err6, err7, err8); err != nil {
			return nil, err
		}
		var entropy func(int) float64
		var channel, conversation, thinking func(int) string
		for _, c := range []struct {
			name string
			read *func(int) string
		}{{"channel", &channel}, {"conversation", &conversation}, {"thinking", &thinking}} {
			if hasColumn(rec, c.name) {
				if *c.read, err1 = stringColumn(rec, t, c.name); err1 != nil {
					return nil, err1
				}
			}
		}
		var topIDs func(int) []int32
		var topLPs func(int) []float64
		var topPieces func(int) []string
		if hasColumn(rec, "entropy") {
			if entropy, err1 = floatColumn(rec, t, "entropy"); err1 != nil {
				return nil, err1
			}
		}
		if hasColumn(rec, "topk_ids") || hasColumn(rec, "topk_logprobs") {
			topIDs, err1 = intListColumn(rec, t, "topk_ids")
			topLPs, err2 = floatListColumn(rec, t, "topk_logprobs")
			if err := firstError(err1, err2); err != nil {
				return nil, err
			}
		}
		if hasColumn(rec, "topk_tokens") {
			if topPieces, err1 = stringListColumn(rec, t, "topk_tokens"); err1 != nil {
				return nil, err1
			}
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			r := TokenRow{SeqID: seq(i), Pos: pos(i), TokenID: id(i), Token: tok(i), Message: msg(i), TargetID: target(i),
				Logprob: lp(i), Rank: rank(i), Entropy: nan}
			if entropy != nil {
				r.Entropy = entropy(i)
			}
			if channel != nil {
				r.Channel = channel(i)
			}
			if conversation != nil {
				r.Conversation = conversation(i)
			}
			if thinking != nil {
				r.Thinking = thinking(i)
			}
			if topIDs != nil {
				r.TopKIDs, r.TopKLogprobs = topIDs(i), topLPs(i)
				if len(r.TopKIDs) != len(r.TopKLogprobs) {
					return nil, fmt.Errorf("plotting: tokens table: seq %d pos %d: %d topk_ids but %d topk_logprobs",
						r.SeqID, r.Pos, len(r.TopKIDs), len(r.TopKLogprobs))
				}
			}
			if topPieces != nil {
				r.TopKTokens = topPieces(i)
				if len(r.TopKTokens) > 0 && len(r.TopKTokens) != len(r.TopKIDs) {
					return nil, fmt.Errorf("plotting: tokens table: seq %d pos %d: %d topk_ids but %d topk_tokens",
						r.SeqID, r.Pos, len(r.TopKIDs), len(r.TopKTokens))
				}
			}
			rows = append(rows, r)
		}
	}
	for i := range len(rows) - 1 { // the next row of the same sequence holds the target's piece
		if n := rows[i+1]; n.SeqID == rows[i].SeqID && n.Pos == rows[i].Pos+1 && n.TokenID == rows[i].TargetID {
			rows[i].TargetToken = n.Token
		}
	}
	return rows, nil
}

// LensRows reads the lens table: seq_id, pos, layer, entropy, target_logprob, target_rank (every table
// the engine has written has them all).
func LensRows(recs ...arrow.RecordBatch) ([]LensRow, error) {
	var rows []LensRow
	for _, rec := range recs {
		const t = "lens"
		seq, err1 := intColumn(rec, t, "seq_id")
		pos, err2 := intColumn(rec, t, "pos")
		layer, err3 := intColumn(rec, t, "layer")
		ent, err4 := floatColumn(rec, t, "entropy")
		lp, err5 := floatColumn(rec, t, "target_logprob")
		rank, err6 := intColumn(rec, t, "target_rank")
		if err := firstError(err1, err2, err3, err4, err5, err6); err != nil {
			return nil, err
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			rows = append(rows, LensRow{SeqID: seq(i), Pos: pos(i), Layer: layer(i), Entropy: ent(i),
				TargetLogprob: lp(i), TargetRank: rank(i)})
		}
	}
	return rows, nil
}

// RouterRows reads the router table: seq_id, pos, layer, expert_ids, expert_weights (every table the
// engine has written has them all). A row's weights are as many as its experts; a null list reads as
// empty.
func RouterRows(recs ...arrow.RecordBatch) ([]RouterRow, error) {
	var rows []RouterRow
	for _, rec := range recs {
		const t = "router"
		seq, err1 := intColumn(rec, t, "seq_id")
		pos, err2 := intColumn(rec, t, "pos")
		layer, err3 := intColumn(rec, t, "layer")
		ids, err4 := intListColumn(rec, t, "expert_ids")
		weights, err5 := floatListColumn(rec, t, "expert_weights")
		if err := firstError(err1, err2, err3, err4, err5); err != nil {
			return nil, err
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			r := RouterRow{SeqID: seq(i), Pos: pos(i), Layer: layer(i), ExpertIDs: ids(i), ExpertWeights: weights(i)}
			if len(r.ExpertWeights) != len(r.ExpertIDs) {
				return nil, fmt.Errorf("plotting: router table: seq %d pos %d layer %d: %d expert_ids but %d expert_weights",
					r.SeqID, r.Pos, r.Layer, len(r.ExpertIDs), len(r.ExpertWeights))
			}
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// AttnResRows reads the attnres table: seq_id, pos, layer, site, weights.
func AttnResRows(recs ...arrow.RecordBatch) ([]AttnResRow, error) {
	var rows []AttnResRow
	for _, rec := range recs {
		const t = "attnres"
		seq, err1 := intColumn(rec, t, "seq_id")
		pos, err2 := intColumn(rec, t, "pos")
		layer, err3 := intColumn(rec, t, "layer")
		site, err4 := stringColumn(rec, t, "site")
		w, err5 := floatListColumn(rec, t, "weights")
		if err := firstError(err1, err2, err3, err4, err5); err != nil {
			return nil, err
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			rows = append(rows, AttnResRow{SeqID: seq(i), Pos: pos(i), Layer: layer(i), Site: site(i), Weights: w(i)})
		}
	}
	return rows, nil
}

// firstError returns the first non-nil error.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
