package tables

import (
	arrowf16 "github.com/apache/arrow-go/v18/arrow/float16"
	"github.com/x448/float16"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// The row writers: each appends rows [from, to) of one part of one validated result to a builder made
// from that table's schema. Field indices follow the field lists in schema.go.

// appendTokens appends the tokens rows of r; part is always 0. piece names the top-k ids (nil: none).
func appendTokens(b *array.RecordBuilder, r *replay.Result, _ int, from, to int, piece func(int32) string) {
	appendKeys(b, r.SeqID, -1, from, to)
	b.Field(2).(*array.Int32Builder).AppendValues(r.Tokens[from:to], nil)
	token := b.Field(3).(*array.StringBuilder)
	message := b.Field(4).(*array.Int32Builder)
	channel := b.Field(5).(*array.StringBuilder)
	for t := from; t < to; t++ {
		// Empty Pieces/Messages/Channels mean "not available" (a request of raw ids or text).
		if len(r.Pieces) > 0 {
			token.Append(r.Pieces[t])
		} else {
			token.Append("")
		}
		if len(r.Messages) > 0 {
			message.Append(r.Messages[t])
		} else {
			message.Append(-1)
		}
		if len(r.Channels) > 0 {
			channel.Append(r.Channels[t])
		} else {
			channel.Append("")
		}
	}
	b.Field(6).(*array.Int32Builder).AppendValues(r.Targets[from:to], nil)
	appendStats(b, 7, r.Stats[from:to], r.Targets[from:to], piece)
	conv, thinking := b.Field(13).(*array.StringBuilder), b.Field(14).(*array.StringBuilder)
	for t := from; t < to; t++ {
		conv.Append(r.Conversation)
		thinking.Append(r.Thinking)
	}
}

// appendLens appends the rows of r.Lens[part]; piece names the top-k ids (nil: none).
func appendLens(b *array.RecordBuilder, r *replay.Result, part, from, to int, piece func(int32) string) {
	l := &r.Lens[part]
	appendKeys(b, r.SeqID, l.Layer, from, to)
	// lens columns are tokens' stats columns in another order: entropy first, then the target's numbers.
	entropy := b.Field(3).(*array.Float32Builder)
	for _, st := range l.Stats[from:to] {
		entropy.Append(st.Entropy)
	}
	appendTarget(b.Field(4).(*array.Float32Builder), b.Field(5).(*array.Int32Builder), l.Stats[from:to], r.Targets[from:to])
	appendTopK(b.Field(6).(*array.ListBuilder), b.Field(7).(*array.ListBuilder), b.Field(8).(*array.ListBuilder),
		l.Stats[from:to], piece)
}

// appendStats appends logprob, rank, entropy, topk_ids, topk_tokens and topk_logprobs starting at field
// first.
func appendStats(b *array.RecordBuilder, first int, stats []ops.TokenStats, targets []int32, piece func(int32) string) {
	appendTarget(b.Field(first).(*array.Float32Builder), b.Field(first+1).(*array.Int32Builder), stats, targets)
	entropy := b.Field(first + 2).(*array.Float32Builder)
	for _, st := range stats {
		entropy.Append(st.Entropy)
	}
	appendTopK(b.Field(first+3).(*array.ListBuilder), b.Field(first+4).(*array.ListBuilder),
		b.Field(first+5).(*array.ListBuilder), stats, piece)
}

// appendTarget appends the target's log probability and rank, null where there is no target: the Result
// holds 0 there, which a reader would take for a certain prediction.
func appendTarget(logprob *array.Float32Builder, rank *array.Int32Builder, stats []ops.TokenStats, targets []int32) {
	for t, st := range stats {
		if targets[t] < 0 {
			logprob.AppendNull()
			rank.AppendNull()
			continue
		}
		logprob.Append(st.Logprob)
		rank.Append(st.Rank)
	}
}

// appendTopK appends one topk_ids, topk_tokens and topk_logprobs list per position; an empty top-k is an
// empty list, not a null, and so is every topk_tokens list when piece is nil.
func appendTopK(ids, pieces, logp *array.ListBuilder, stats []ops.TokenStats, piece func(int32) string) {
	idv := ids.ValueBuilder().(*array.Int32Builder)
	pv := pieces.ValueBuilder().(*array.StringBuilder)
	lpv := logp.ValueBuilder().(*array.Float32Builder)
	for _, st := range stats {
		ids.Append(true)
		idv.AppendValues(st.TopIDs, nil)
		pieces.Append(true)
		if piece != nil {
			for _, id := range st.TopIDs {
				pv.Append(piece(id))
			}
		}
		logp.Append(true)
		lpv.AppendValues(st.TopLogp, nil)
	}
}

// appendHidden32 appends the rows of r.Hidden[part] as float32 vectors, bit for bit.
func appendHidden32(b *array.RecordBuilder, r *replay.Result, part, from, to int) {
	h := &r.Hidden[part]
	appendKeys(b, r.SeqID, h.Layer, from, to)
	vec := b.Field(3).(*array.FixedSizeListBuilder)
	for t := from; t < to; t++ {
		vec.Append(true)
	}
	vec.ValueBuilder().(*array.Float32Builder).AppendValues(h.Values[from*h.Dim:to*h.Dim], nil)
}

// appendHidden16 appends the rows of r.Hidden[part] as float16 vectors. The conversion is x448/float16's
// Fromfloat32 (IEEE round to nearest even, subnormals kept, overflow to infinity): arrow-go's own
// float16.New truncates the mantissa and flushes subnormals to zero, which biases every value toward 0.
func appendHidden16(b *array.RecordBuilder, r *replay.Result, part, from, to int) {
	h := &r.Hidden[part]
	appendKeys(b, r.SeqID, h.Layer, from, to)
	vec := b.Field(3).(*array.FixedSizeListBuilder)
	vals := vec.ValueBuilder().(*array.Float16Builder)
	vals.Reserve((to - from) * h.Dim)
	for t := from; t < to; t++ {
		vec.Append(true)
		for _, v := range h.Values[t*h.Dim : (t+1)*h.Dim] {
			vals.UnsafeAppend(arrowf16.FromBits(float16.Fromfloat32(v).Bits()))
		}
	}
}

// appendRouter appends the rows of r.Router[part]: K expert ids and weights per position.
func appendRouter(b *array.RecordBuilder, r *replay.Result, part, from, to int) {
	rt := &r.Router[part]
	appendKeys(b, r.SeqID, rt.Layer, from, to)
	appendIDRows(b.Field(3).(*array.ListBuilder), rt.IDs, rt.K, from, to)
	appendWeightRows(b.Field(4).(*array.ListBuilder), rt.Weights, rt.K, from, to)
}

// appendAttnRes appends the rows of r.Mixes[part]: the site name and N weights per position.
func appendAttnRes(b *array.RecordBuilder, r *replay.Result, part, from, to int) {
	m := &r.Mixes[part]
	appendKeys(b, r.SeqID, m.Layer, from, to)
	site := b.Field(3).(*array.StringBuilder)
	for t := from; t < to; t++ {
		site.Append(m.Site)
	}
	appendWeightRows(b.Field(4).(*array.ListBuilder), m.Weights, m.N, from, to)
}

// appendIDRows appends rows [from, to) of the row-major matrix flat (width columns) as one list per row.
func appendIDRows(lb *array.ListBuilder, flat []int32, width, from, to int) {
	vb := lb.ValueBuilder().(*array.Int32Builder)
	for t := from; t < to; t++ {
		lb.Append(true)
		vb.AppendValues(flat[t*width:(t+1)*width], nil)
	}
}

// appendWeightRows is appendIDRows for float32 matrices.
func appendWeightRows(lb *array.ListBuilder, flat []float32, width, from, to int) {
	vb := lb.ValueBuilder().(*array.Float32Builder)
	for t := from; t < to; t++ {
		lb.Append(true)
		vb.AppendValues(flat[t*width:(t+1)*width], nil)
	}
}

// appendKeys appends seq_id, pos and, when layer >= 0, layer for rows [from, to).
func appendKeys(b *array.RecordBuilder, seq int32, layer, from, to int) {
	sb := b.Field(0).(*array.Int32Builder)
	pb := b.Field(1).(*array.Int32Builder)
	for t := from; t < to; t++ {
		sb.Append(seq)
		pb.Append(int32(t))
	}
	if layer >= 0 {
		lb := b.Field(2).(*array.Int32Builder)
		for t := from; t < to; t++ {
			lb.Append(int32(layer))
		}
	}
}
