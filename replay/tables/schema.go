package tables

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
)

// Table names: the value of the "potato.table" schema metadata key and the infix of a Set's file names
// (results.tokens.arrow, ...).
const (
	TokensTable  = "tokens"
	LensTable    = "lens"
	HiddenTable  = "hidden"
	RouterTable  = "router"
	AttnResTable = "attnres"
)

// TableNames lists every table in the order a Set holds, writes and reads them.
var TableNames = []string{TokensTable, LensTable, HiddenTable, RouterTable, AttnResTable}

// Schema metadata keys. MetaTable and MetaSchemaVersion are set by this package on every schema; the other
// keys are the spelling callers should use for the provenance they pass in Options.Metadata, so that every
// producer labels results the same way.
const (
	MetaTable         = "potato.table"          // one of TableNames
	MetaSchemaVersion = "potato.schema_version" // SchemaVersion, as a decimal string
	MetaConfigHash    = "potato.config_hash"    // hash of the model's config.json
	MetaWeightsHash   = "potato.weights_hash"   // the checkpoint's fingerprint (a hash of its tensor tables and a sample of its data)
	MetaEngine        = "potato.engine_version" // version of the engine that computed the results
	MetaPrecision     = "potato.precision"      // "bf16" or "fp32" (DESIGN.md, Numerics)
	MetaBackend       = "potato.backend"        // "cpu", "cuda", ...
	MetaResultSet     = "potato.result_set"     // one id shared by every table of one run (NewSetID)
	MetaRequestHash   = "potato.request_hash"   // hash of what was replayed (replay.Request.Hash)
)

// ProvenanceKeys are the metadata keys every producer of results (the CLI, the service) puts on every
// table, so that tables of different runs can never be taken for one set.
var ProvenanceKeys = []string{MetaResultSet, MetaRequestHash, MetaConfigHash, MetaWeightsHash, MetaEngine, MetaPrecision, MetaBackend}

// NewSetID returns a fresh result-set id: 16 random hexadecimal digits.
func NewSetID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// metaValue returns the value of key in schema's metadata, or "" (also for a nil schema).
func metaValue(schema *arrow.Schema, key string) string {
	if schema == nil {
		return ""
	}
	md := schema.Metadata()
	if i := md.FindKey(key); i >= 0 {
		return md.Values()[i]
	}
	return ""
}

// SchemaVersion is bumped whenever a column is added, removed, renamed or changes type, so that a reader
// of old files can tell which layout it holds. Version 2 added topk_tokens to the tokens and lens tables;
// version 3 conversation and thinking to the tokens table, and .arrow files became Arrow IPC files.
const SchemaVersion = 3

// Column types shared by several tables. Lists use arrow's default element field ("item", nullable), the
// same type pyarrow.list_(pyarrow.int32()) builds, so that schemas compare equal across languages; the
// elements are never null.
var (
	int32Type   = arrow.PrimitiveTypes.Int32
	float32Type = arrow.PrimitiveTypes.Float32
	stringType  = arrow.BinaryTypes.String
	idsType     = arrow.ListOf(arrow.PrimitiveTypes.Int32)
	logpType    = arrow.ListOf(arrow.PrimitiveTypes.Float32)
	piecesType  = arrow.ListOf(arrow.BinaryTypes.String)
)

// Key columns: every table starts with seq_id and pos; per-layer tables add the 0-indexed layer.
var (
	seqField   = arrow.Field{Name: "seq_id", Type: int32Type}       // replay.Result.SeqID
	posField   = arrow.Field{Name: "pos", Type: int32Type}          // 0-indexed token position in the sequence
	layerField = arrow.Field{Name: "layer", Type: int32Type}        // 0-indexed decoder layer
	topIDs     = arrow.Field{Name: "topk_ids", Type: idsType}       // the k most probable next ids, descending; ties to the lower id
	topPieces  = arrow.Field{Name: "topk_tokens", Type: piecesType} // their display pieces (Options.Piece), same order
	topLogp    = arrow.Field{Name: "topk_logprobs", Type: logpType} // their log probabilities, same order
)

// tokensFields is the tokens table: one row per position of every sequence, the model's own next-token
// statistics (the last layer's readout).
//
// Alignment: the row at pos p is the distribution after reading tokens 0..p, so its logprob, rank,
// entropy and top-k are about the *next* token, p+1 (target_id), not about token_id; the lens table
// follows the same rule. The hidden, router and attnres tables differ: their row at pos p describes the
// input token at p itself (README, "Which token a number is about"). So the logprob of the token at p is
// on the row at pos p-1, and the first token of a sequence has none.
//
// The token and topk_tokens columns are a display form, not the raw text: tokenizer.Tokenizer.Piece, which
// writes a BPE token's bytes through tokenizer.DisplayBytes (a newline is the two characters \n, a tab
// \t, a carriage return \r, other control characters \x01 or \u0085, a backslash \\, and each byte
// that is not part of valid UTF-8, such as one third of a Han character, <0xC3>) and a special token as
// its name (<|open|>). Concatenating pieces does not give the text back. The raw form is in token_id and
// topk_ids: tokenizer.Load(modelDir) and then Decode(ids) (the bytes joined, special tokens by name) or
// Token(id) (one token's bytes); `potato tokenize` prints ids and pieces.
var tokensFields = []arrow.Field{
	seqField,
	posField,
	{Name: "token_id", Type: int32Type},  // the input token at pos
	{Name: "token", Type: stringType},    // its display piece (see above; "" for a model without a tokenizer)
	{Name: "message", Type: int32Type},   // index of the chat message the token belongs to; -1: none
	{Name: "channel", Type: stringType},  // structure/system/user/think/response/tool... in a conversation; "text" for raw text; "" for ids
	{Name: "target_id", Type: int32Type}, // token_id at pos+1, the id scored here; -1 at the last position
	// log p(target_id) and its rank: 1 + the number of ids the model finds strictly more probable, so ids
	// of exactly equal probability share a rank (bfloat16 logits tie often) and a target of rank 1 need not
	// be topk_ids[0], which breaks ties towards the lower id. Null where target_id is -1, because 0 would
	// read as a certain prediction.
	{Name: "logprob", Type: float32Type, Nullable: true},
	{Name: "rank", Type: int32Type, Nullable: true},
	{Name: "entropy", Type: float32Type}, // nats, over the full vocabulary, never a top-k estimate
	// The top-k: ids, their pieces rendered as the token column's (an empty list when the builder had no
	// tokenizer, so that a notebook needs no tokenizer of its own to read them), log probabilities.
	topIDs,
	topPieces,
	topLogp,
	// The conversation the sequence was rendered from: its id (from the input, else its line or item
	// number in the file) and thinking mode ("on" or "off"); both "" for text and token ids. Together with
	// message they say which turn of which conversation, replayed how, a row belongs to.
	{Name: "conversation", Type: stringType},
	{Name: "thinking", Type: stringType},
}

// lensFields is the logit-lens table: one row per position of every sequence at every requested layer, the
// readout (output AttnRes mix, model.norm, lm_head) of that layer's running state. At the last layer it
// equals the tokens table bit for bit (DESIGN.md, Outputs). As in the tokens table, the row at pos p
// scores the next token, p+1 (the tokens table's target_id at p); topk_tokens is the same display form.
var lensFields = []arrow.Field{
	seqField,
	posField,
	layerField,
	{Name: "entropy", Type: float32Type}, // nats, full vocabulary
	{Name: "target_logprob", Type: float32Type, Nullable: true}, // null without a target, as in tokens
	{Name: "target_rank", Type: int32Type, Nullable: true},      // null without a target
	topIDs,
	topPieces, // as in tokens
	topLogp,
}

// hiddenFields is the hidden-state table: the running sum after a requested layer, one fixed-size vector
// per position. elem is float32, or float16 when the caller trades precision for half the bytes. The row
// at pos p is the state of the input token at p (having attended to tokens 0..p), the one the tokens and
// lens rows at p read out to predict token p+1.
func hiddenFields(dim int32, elem arrow.DataType) []arrow.Field {
	return []arrow.Field{
		seqField,
		posField,
		layerField,
		{Name: "vector", Type: arrow.FixedSizeListOf(dim, elem)},
	}
}

// routerFields is the MoE routing table: per MoE layer and position, the experts chosen for the input
// token at pos p (its own state at that layer, not the next token's) and the weights applied to their
// outputs.
//
// expert_ids is in selection order: descending by the biased score s_i + e_score_correction_bias_i, ties
// to the lower id (ops.Routing; K3_SPEC.md 5.5). The bias only selects, so expert_ids[0] need not have
// the largest weight: sort by expert_weights for that. expert_weights (same order, same length) are
// s_i / (sum of the chosen s_j + 1e-20) times the config's routed_scaling_factor, fp32, where s_i is the
// router's sigmoid score without the bias. They include the factor, so a row sums to
// routed_scaling_factor, up to rounding: 1.0 on K3 and on the demo model, so 1 there; a checkpoint whose
// config says otherwise sums to its own factor.
var routerFields = []arrow.Field{
	seqField,
	posField,
	layerField,
	{Name: "expert_ids", Type: idsType},
	{Name: "expert_weights", Type: logpType},
}

// attnresFields is the AttnRes table: per mixing site ("attn", "mlp" or "output") of a layer and position,
// the softmax weights over the completed block vectors followed by the running sum (K3_SPEC.md). The
// "output" site is the readout's mix: it has rows at the last layer and at each lens layer of the request
// (a lens readout mixes there too), none elsewhere. The row at pos p mixes the input token at p's own
// vectors; its "output" mix is the one the tokens or lens row at p reads out to predict token p+1.
var attnresFields = []arrow.Field{
	seqField,
	posField,
	layerField,
	{Name: "site", Type: stringType},
	{Name: "weights", Type: logpType},
}

// Schema returns the schema of table name with its metadata. dim and float16 describe the hidden vector
// (ignored for the other tables); meta holds the caller's provenance and may not override the keys this
// package sets.
func Schema(name string, dim int, float16 bool, meta map[string]string) (*arrow.Schema, error) {
	var fields []arrow.Field
	switch name {
	case TokensTable:
		fields = tokensFields
	case LensTable:
		fields = lensFields
	case HiddenTable:
		if dim <= 0 || dim > maxInt32 {
			return nil, fmt.Errorf("tables: hidden schema: vector dim %d out of range", dim)
		}
		var elem arrow.DataType = arrow.PrimitiveTypes.Float32
		if float16 {
			elem = arrow.FixedWidthTypes.Float16
		}
		fields = hiddenFields(int32(dim), elem)
	case RouterTable:
		fields = routerFields
	case AttnResTable:
		fields = attnresFields
	default:
		return nil, fmt.Errorf("tables: unknown table %q (want one of %v)", name, TableNames)
	}
	md, err := schemaMetadata(name, meta)
	if err != nil {
		return nil, err
	}
	return arrow.NewSchema(fields, &md), nil
}

// schemaMetadata merges the package's keys with the caller's, in sorted key order so that two builds with
// equal inputs produce byte-identical files.
func schemaMetadata(name string, meta map[string]string) (arrow.Metadata, error) {
	kv := map[string]string{
		MetaTable:         name,
		MetaSchemaVersion: strconv.Itoa(SchemaVersion),
	}
	for k, v := range meta {
		if _, reserved := kv[k]; reserved {
			return arrow.Metadata{}, fmt.Errorf("tables: metadata key %q is set by this package", k)
		}
		kv[k] = v
	}
	return sortedMetadata(kv), nil
}

// sortedMetadata is kv as Arrow metadata in sorted key order, the order every table of this package is
// written with, so that equal inputs give byte-identical files.
func sortedMetadata(kv map[string]string) arrow.Metadata {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	vals := make([]string, len(keys))
	for i, k := range keys {
		vals[i] = kv[k]
	}
	return arrow.NewMetadata(keys, vals)
}

// WithMetadata returns schema with the keys of set given their values in its metadata (the others kept),
// in the sorted order Build writes, so that a table restamped this way (a merge's result-set id) still
// gives equal bytes for equal inputs.
func WithMetadata(schema *arrow.Schema, set map[string]string) *arrow.Schema {
	md := schema.Metadata()
	kv := make(map[string]string, md.Len()+len(set))
	for i, k := range md.Keys() {
		kv[k] = md.Values()[i]
	}
	for k, v := range set {
		kv[k] = v
	}
	out := sortedMetadata(kv)
	return arrow.NewSchema(schema.Fields(), &out)
}

// TableName returns the "potato.table" metadata of schema, or "" when it has none (a file written by
// another tool) or schema is nil (a reader that failed before it knew its schema).
func TableName(schema *arrow.Schema) string {
	if schema == nil {
		return ""
	}
	md := schema.Metadata()
	if i := md.FindKey(MetaTable); i >= 0 {
		return md.Values()[i]
	}
	return ""
}

// maxInt32 bounds every count written to an int32 column.
const maxInt32 = 1<<31 - 1
