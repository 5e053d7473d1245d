package tables

import (
	"fmt"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/potato-k3/potato-k3/internal/hostmem"
	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// The host memory a replay's results hold until they are written, counted from the code that holds it,
// so that the CLI (--max-result-bytes), a dataset job and the service refuse a request before compute
// rather than die of it after. Three things are alive together at the peak, while the last table is
// written:
//
//   - The results: the engine's []replay.Result and the request's sequences they share. Each position's
//     top-k ids and log probabilities are allocations of their own (cpu's rowStats), rounded up to the Go
//     allocator's size classes; hidden states, routing and AttnRes weights are wave-wide arrays that the
//     results slice. A wave computes the union of its requests' options for every one of its tokens, and
//     each request's results keep those allocations alive (split slices the arrays; truncTopK keeps each
//     position's whole top-k allocation), so requests that share a wave are counted under the union.
//   - The tables: Build's record batches, or the one being written when they are streamed
//     (Output.Streamed). An Arrow builder grows each buffer to the next power of two
//     (arrow/array's builder.reserve and bufferBuilder.Append) and the batch keeps that capacity
//     (memory.Buffer.resize shrinks in place); the Go allocator adds 64 bytes of alignment to each
//     buffer; every builder has a validity bitmap, nulls or not. While a buffer grows its old copy lives
//     beside the new one: half the largest buffer.
//   - The writer's working memory. Parquet (pqarrow) writes a batch column by column; for one column it
//     builds def and rep levels, converts string and float16 values to 24-byte slice headers
//     (parquet.ByteArray, FixedLenByteArray) and holds the chunk's dictionary-encoded pages until the
//     chunk closes (colCost.parquetBytes); beside that the zstd encoder's history window (16 MB), page
//     buffers and the dictionary: parquetFixed. An Arrow IPC writer holds a few small buffers: ipcFixed.
//
// The estimate counts live bytes and rounds up where the count depends on data it does not see: a top-k
// list's pieces are counted as the longest pieces of the vocabulary, a mix as the most weights any mix
// has. The Go collector lets the heap grow past the live bytes before it collects (to about twice them
// at GOGC=100), which the default limit, half the memory available, leaves room for.

// Writers' fixed working memory (see above). parquetFixed holds the zstd encoders the codec pools (one a
// processor at most, each with a 16 MB history), the page being built and compressed, a dictionary of up
// to 1 MB with its hash table, and level buffers pooled from the column before: writing the tiny model's
// tokens and lens tables held 46 to 61 MB beside the per-value costs (colCost.parquetBytes).
const (
	parquetFixed = 64 << 20
	ipcFixed     = 4 << 20
)

// Shape is what the estimate needs to know of the model.
type Shape struct {
	Layers          int // decoder layers: AttnRes mix sites are 2 a layer
	Hidden          int // hidden size: one hidden-table vector
	MoELayers       int // layers with routed experts: router rows per token
	ExpertsPerToken int // experts each token is routed to: expert_ids per router row
	MixWeights      int // most weights one AttnRes mix holds per token: the completed blocks and the running sum
	// TopPieceBytes[k] is the bytes of the vocabulary's k longest pieces together: no top-k list of k
	// distinct ids names more in its topk_tokens. Empty without a tokenizer (the lists are empty then).
	TopPieceBytes []int64
}

// ShapeOf is the shape of plan's model; piece names its token ids for the topk_tokens columns
// (Options.Piece), nil without a tokenizer.
func ShapeOf(plan *model.Plan, piece func(id int32) string) Shape {
	s := Shape{Layers: len(plan.Layers), Hidden: plan.Config.HiddenSize,
		ExpertsPerToken: plan.Config.NumExpertsPerToken}
	for _, l := range plan.Layers {
		if l.FFN == model.MoE {
			s.MoELayers++
		}
	}
	if len(plan.Layers) > 0 {
		// a mix weighs the completed blocks and the running sum, which is never banked after the last layer
		s.MixWeights = plan.MaxBlocks() + 1
	}
	if piece != nil {
		lens := make([]int64, plan.Config.VocabSize)
		for id := range lens {
			lens[id] = int64(len(piece(int32(id))))
		}
		slices.Sort(lens)
		slices.Reverse(lens)
		s.TopPieceBytes = make([]int64, len(lens)+1)
		for i, n := range lens {
			s.TopPieceBytes[i+1] = s.TopPieceBytes[i] + n
		}
	}
	return s
}

// topPieces bounds the piece bytes of one top-k list of k ids.
func (s Shape) topPieces(k int) int64 {
	if len(s.TopPieceBytes) == 0 {
		return 0
	}
	return s.TopPieceBytes[min(k, len(s.TopPieceBytes)-1)]
}

// Output is one request whose results are held, then built into tables and written as one file per
// table.
type Output struct {
	Request replay.Request
	// Format is FormatParquet, FormatIPC or FormatIPCStream (FormatOf), or "" when the results are only
	// held (the CLI without --out): no tables are built.
	Format  string
	Float16 bool // Options.HiddenFloat16
	// Streamed says the tables are written batch by batch as they are built (NewReader into
	// WriteSetFrom), as the service spills them: one batch is held at a time, not the whole Set.
	Streamed bool
}

// Estimate is the host memory results hold until written, in its three parts (see above).
type Estimate struct {
	Results   int64 // the []replay.Result and the request's sequences they share
	Tables    int64 // Build's record batches (the largest one when streamed)
	Transient int64 // the most held beside both at once: a writer's working memory, or a growing buffer's old copy
}

// Total is the estimate's peak: all three parts together.
func (e Estimate) Total() int64 { return e.Results + e.Tables + e.Transient }

// String is the total with its parts: "4.1 GB (results 1.0 GB, tables 2.0 GB, writing 1.1 GB)".
func (e Estimate) String() string {
	return fmt.Sprintf("%s (results %s, tables %s, writing %s)", numtext.Bytes(e.Total()), numtext.Bytes(e.Results),
		numtext.Bytes(e.Tables), numtext.Bytes(e.Transient))
}

// Estimate is the memory out's results hold when its request is replayed alone, then built and written.
func (s Shape) Estimate(out Output) Estimate {
	return s.EstimateWave([]Output{out})
}

// EstimateWave is the memory held when the requests of outs are replayed as one wave (one Engine.Run)
// and every request's tables are then built and written at once, as the service spills the jobs of a
// wave: the results under the union of the requests' options (see above), each request's tables and
// writer.
func (s Shape) EstimateWave(outs []Output) Estimate {
	var e Estimate
	var union replay.Options
	tokens := 0
	for _, out := range outs {
		e.Results += s.InputBytes(out.Request)
		union = UnionOptions(union, out.Request.Options)
		for _, seq := range out.Request.Sequences {
			tokens += len(seq.Tokens)
		}
		t := s.tableBytes(out)
		e.Tables += t.Tables
		e.Transient += t.Transient
	}
	e.Results += int64(tokens) * s.TokenBytes(union)
	return e
}

// UnionOptions is what a wave of requests with options a and b computes for every token: the larger
// top-k, both layer lists, either capture. Only the counts matter to the estimate.
func UnionOptions(a, b replay.Options) replay.Options {
	u := replay.Options{TopK: max(a.TopK, b.TopK), Router: a.Router || b.Router, AttnRes: a.AttnRes || b.AttnRes}
	u.Lens = unionLayers(a.Lens, b.Lens)
	u.Hidden = unionLayers(a.Hidden, b.Hidden)
	return u
}

// unionLayers is the sorted set of the layers of a and b.
func unionLayers(a, b []int) []int {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// Sizes of the result structs, for the per-token and per-sequence counts.
var (
	tokenStatsSize = int64(unsafe.Sizeof(ops.TokenStats{}))
	resultSize     = int64(unsafe.Sizeof(replay.Result{}))
	partSize       = max(int64(unsafe.Sizeof(replay.LayerStats{})), int64(unsafe.Sizeof(replay.LayerVectors{})),
		int64(unsafe.Sizeof(replay.LayerRouting{})), int64(unsafe.Sizeof(replay.Mix{})))
)

// TokenBytes is what the results of one token hold under options o, beside its input (InputBytes): the
// target id; the model's and every lens layer's statistics, each with its top-k ids and log
// probabilities as allocations of their own; each hidden layer's vector (float32); each MoE layer's
// expert ids and weights; each AttnRes mix's weights (2 sites a layer and an output mix for the last
// layer and every lens layer).
func (s Shape) TokenBytes(o replay.Options) int64 {
	var k int64
	if o.TopK > 0 {
		k = 2 * allocBytes(int64(o.TopK)*4) // TopIDs int32, TopLogp float32
	}
	n := 4 + int64(1+len(o.Lens))*(tokenStatsSize+k) + int64(len(o.Hidden))*int64(s.Hidden)*4
	if o.Router {
		n += int64(s.MoELayers) * int64(s.ExpertsPerToken) * 8
	}
	if o.AttnRes {
		n += int64(2*s.Layers+1+len(o.Lens)) * int64(s.MixWeights) * 4
	}
	return n
}

// InputBytes is what req's sequences hold (ids, pieces, messages, channels), which its results share,
// and each sequence's Result with its lists of captures (grown by append: up to twice their length).
func (s Shape) InputBytes(req replay.Request) int64 {
	o := req.Options
	parts := int64(len(o.Lens) + len(o.Hidden))
	if o.Router {
		parts += int64(s.MoELayers)
	}
	if o.AttnRes {
		parts += int64(2*s.Layers + 1 + len(o.Lens))
	}
	var n int64
	for _, seq := range req.Sequences {
		n += resultSize + 2*parts*partSize
		n += int64(len(seq.Tokens))*4 + int64(len(seq.Messages))*4 + int64(len(seq.Channels))*16
		for _, p := range seq.Pieces {
			n += 16 + allocBytes(int64(len(p)))
		}
	}
	return n
}

// colCost is one column of one record batch, as much as the estimate needs of it.
type colCost struct {
	width  int64 // bytes of one fixed-width value; 0: strings
	values int64 // leaf values (the rows of a flat column)
	data   int64 // string bytes
	list   bool  // a list: offsets above the values
	fixed  bool  // a fixed-size list: a validity bitmap above the values, no offsets
}

// arrowBytes is what the column's buffers take in a batch of rows, and its largest buffer.
func (c colCost) arrowBytes(rows int64) (total, largest int64) {
	add := func(b int64) {
		total += b
		largest = max(largest, b)
	}
	if c.list {
		add(arrowBuf((rows + 1) * 4)) // offsets
		add(arrowBuf(bitmapBytes(rows)))
	}
	if c.fixed {
		add(arrowBuf(bitmapBytes(rows)))
	}
	if c.values == 0 {
		return total, largest
	}
	add(arrowBuf(bitmapBytes(c.values)))
	if c.width > 0 {
		add(arrowBuf(c.values * c.width))
		return total, largest
	}
	add(arrowBuf((c.values + 1) * 4)) // string offsets
	add(arrowBuf(c.data))
	return total, largest
}

// parquetBytes is the Parquet writer's working memory for the column in a batch of rows, beside
// parquetFixed. Per value: def and rep levels (2 bytes each, in pooled buffers grown by doubling: up to
// 8), the dictionary-encoded pages held until the chunk closes (up to 4), index and page buffers freed
// page by page but not yet collected (4); a string or float16 value also gets a 24-byte slice header.
// Measured on the tiny model's tables at GOGC 1 to 10: 38 to 40 bytes a value for strings and float16,
// 8 to 11 for int32 and float32 lists.
func (c colCost) parquetBytes(rows int64, float16 bool) int64 {
	per := int64(16)
	if c.width == 0 || (float16 && c.fixed) {
		per += 24
	}
	return max(c.values, rows) * per // an empty list still has its levels
}

// tableCost is one table of an Output: its rows and the columns of a batch of given rows.
type tableCost struct {
	rows    int64
	maxRows int64
	columns func(from, rows int64) []colCost
}

// tableBytes is the Tables and Transient of out: every batch of every table Build makes (the largest
// when streamed), and the most that building or writing any of them holds beside them.
func (s Shape) tableBytes(out Output) Estimate {
	var e Estimate
	if out.Format == "" {
		return e
	}
	var largest, writer int64
	for _, t := range s.tablesOf(out) {
		for from := int64(0); from < t.rows; from += t.maxRows {
			rows := min(t.maxRows, t.rows-from)
			var w, batch int64
			for _, c := range t.columns(from, rows) {
				b, l := c.arrowBytes(rows)
				batch += b
				largest = max(largest, l)
				w = max(w, c.parquetBytes(rows, out.Float16))
			}
			writer = max(writer, w)
			if out.Streamed {
				e.Tables = max(e.Tables, batch)
			} else {
				e.Tables += batch
			}
		}
	}
	if out.Format == FormatParquet {
		writer += parquetFixed
	} else {
		writer = ipcFixed
	}
	e.Transient = max(writer, largest/2)
	return e
}

// tablesOf lists the tables Build makes of out's results, with their batches' columns (schema.go's field
// lists, in order).
func (s Shape) tablesOf(out Output) []tableCost {
	req, o := out.Request, out.Request.Options
	var tokens int64
	for _, seq := range req.Sequences {
		tokens += int64(len(seq.Tokens))
	}
	k := int64(o.TopK)
	pieces := s.topPieces(o.TopK)
	topk := func(rows int64) []colCost {
		if len(s.TopPieceBytes) == 0 { // no tokenizer: empty topk_tokens lists
			return []colCost{{width: 4, values: rows * k, list: true}, {list: true}, {width: 4, values: rows * k, list: true}}
		}
		return []colCost{{width: 4, values: rows * k, list: true}, {values: rows * k, data: rows * pieces, list: true},
			{width: 4, values: rows * k, list: true}}
	}
	flat := func(rows int64, n int) []colCost {
		cs := make([]colCost, n)
		for i := range cs {
			cs[i] = colCost{width: 4, values: rows}
		}
		return cs
	}
	strs := stringBytes(req.Sequences)
	ts := []tableCost{{rows: tokens, maxRows: DefaultBatchRows, columns: func(from, rows int64) []colCost {
		tok, ch, conv, think := strs.between(from, from+rows)
		cs := flat(rows, 8) // seq_id pos token_id message target_id logprob rank entropy
		cs = append(cs, colCost{values: rows, data: tok}, colCost{values: rows, data: ch}, colCost{values: rows, data: conv},
			colCost{values: rows, data: think})
		return append(cs, topk(rows)...)
	}}}
	if len(o.Lens) > 0 {
		ts = append(ts, tableCost{rows: tokens * int64(len(o.Lens)), maxRows: DefaultBatchRows, columns: func(_, rows int64) []colCost {
			return append(flat(rows, 6), topk(rows)...) // seq_id pos layer entropy target_logprob target_rank
		}})
	}
	if len(o.Hidden) > 0 {
		elem := int64(4)
		if out.Float16 {
			elem = 2
		}
		dim := int64(s.Hidden)
		ts = append(ts, tableCost{rows: tokens * int64(len(o.Hidden)), maxRows: min(DefaultBatchRows, max(1, hiddenBatchBytes/(dim*elem))),
			columns: func(_, rows int64) []colCost {
				return append(flat(rows, 3), colCost{width: elem, values: rows * dim, fixed: true})
			}})
	}
	if o.Router && s.MoELayers > 0 {
		e := int64(s.ExpertsPerToken)
		ts = append(ts, tableCost{rows: tokens * int64(s.MoELayers), maxRows: DefaultBatchRows, columns: func(_, rows int64) []colCost {
			return append(flat(rows, 3), colCost{width: 4, values: rows * e, list: true}, colCost{width: 4, values: rows * e, list: true})
		}})
	}
	if o.AttnRes {
		sites, n := int64(2*s.Layers+1+len(o.Lens)), int64(s.MixWeights)
		ts = append(ts, tableCost{rows: tokens * sites, maxRows: DefaultBatchRows, columns: func(_, rows int64) []colCost {
			return append(flat(rows, 3), colCost{values: rows, data: rows * int64(len("output"))},
				colCost{width: 4, values: rows * n, list: true})
		}})
	}
	return ts
}

// stringBytes is the tokens table's rows: their string bytes (token, channel, conversation, thinking).
type stringBytes []replay.Sequence

// between is the token, channel, conversation and thinking bytes of rows [from, to) of the tokens table.
func (sb stringBytes) between(from, to int64) (tok, ch, conv, think int64) {
	row := int64(0)
	for _, seq := range sb {
		n := int64(len(seq.Tokens))
		lo, hi := max(from, row), min(to, row+n)
		if lo < hi {
			for t := lo - row; t < hi-row; t++ {
				if len(seq.Pieces) > 0 {
					tok += int64(len(seq.Pieces[t]))
				}
				if len(seq.Channels) > 0 {
					ch += int64(len(seq.Channels[t]))
				}
			}
			conv += (hi - lo) * int64(len(seq.Conversation))
			think += (hi - lo) * int64(len(seq.Thinking))
		}
		row += n
		if row >= to {
			break
		}
	}
	return tok, ch, conv, think
}

// arrowBuf is the Go memory of an Arrow buffer that grew to hold n bytes: the next power of two, rounded
// to 64 bytes, plus the allocator's 64 bytes of alignment (memory.GoAllocator), in a Go size class.
func arrowBuf(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return allocBytes((nextPow2(n)+63)&^63 + 64)
}

// bitmapBytes is a validity bitmap's bytes for n values.
func bitmapBytes(n int64) int64 { return (n + 7) / 8 }

// nextPow2 is the least power of two >= n (1 for n <= 1).
func nextPow2(n int64) int64 {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len64(uint64(n-1))
}

// sizeClasses are the Go allocator's small object sizes (internal/runtime/gc/sizeclasses.go, Go 1.26);
// larger objects take whole 8 KiB pages.
var sizeClasses = []int64{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288,
	320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048, 2304,
	2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880, 12288,
	13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

// allocBytes is the memory the Go allocator takes for an object of n bytes.
func allocBytes(n int64) int64 {
	if n <= 0 {
		return 0
	}
	if n > sizeClasses[len(sizeClasses)-1] {
		return (n + 8191) &^ 8191
	}
	i, _ := slices.BinarySearch(sizeClasses, n)
	return sizeClasses[i]
}

// DefaultResultLimit is the limit on an estimate when none is given (--max-result-bytes 0): half the
// memory available when it is called (hostmem.Available; half of hostmem.Assumed where the system does not
// say), and what it is, for messages. Results past it would push the process toward the kernel's
// out-of-memory killer or Go's fatal out-of-memory error, neither of which says which flag to change;
// the other half is the collector's room (see above).
func DefaultResultLimit() (int64, string) {
	avail, ok := hostmem.Available()
	if !ok {
		return avail / 2, "half the memory assumed where the memory available is unknown"
	}
	return avail / 2, "half the memory available"
}
