// Package tokenizer turns text and chat conversations into Kimi K3 token ids, with every token's message
// and channel, and writes the tokenizer files of synthetic checkpoints.
//
// # Loading and encoding
//
// A model directory holds tiktoken.model (byte-level BPE: base64 of each token's bytes and its rank, which
// is its id) and tokenizer_config.json (the 256 special tokens after the BPE tokens). Load reads both:
//
//	tok, err := tokenizer.Load("/models/Kimi-K3")
//	ids := tok.Encode("Hello world")         // specials disabled: "<|open|>" is plain text
//	ids = tok.EncodeSpecial("<|open|>hi")    // special names become special ids
//	text, err := tok.Decode(ids)             // specials decode to their names
//	fmt.Println(tok.Piece(ids[0]))           // one token for display; <0xE4> for a partial byte
//
// Encode computes what Kimi's tiktoken-based tokenizer computes: the long-input rule (cuts at 400,000
// characters and inside runs of more than 25,000 whitespace or non-whitespace characters), the K3
// pre-tokenizer (Pattern, written by hand in split.go because Go's regexp has neither class
// intersection nor lookahead; Pieces and Split expose it), then tiktoken's byte-pair merge on each
// piece. Bytes that are not valid UTF-8 are kept and classified as U+FFFD, so any bytes round-trip. A
// Tokenizer is safe for concurrent use; it caches the merges of short pieces.
//
// # Conversations
//
// EncodeConversation renders a Conversation in the K3 chat format (XTML) segment by segment and returns
// Tokens: id, message index (-1 for none) and Channel. Thinking mode is never defaulted:
// ThinkingUnset is an error. chat.go lists what the spec leaves open (tool-call markup, where the
// thinking-effort message goes) in one place. EncodeText wraps raw text the same way.
//
// # Synthetic vocabularies
//
// Synthetic checkpoints need a tokenizer of any size without files or network. The package embeds
// LearnedSize tokens that Train learned from the Go source tree and a multilingual sample
// (data/learned.txt records the corpus; internal/trainvocab regenerates it). BuiltinTokens(n) takes
// the first n, or pads past LearnedSize with Pad (concatenations of learned tokens); WriteModelFiles
// writes them as tiktoken.model plus a tokenizer_config.json with the K3 special names at the K3
// offsets (K3Config). The full K3 shape is WriteModelFiles(dir, 163584).
//
// # Agreement with tiktoken
//
// testdata/tiktoken_golden.py encodes the 12,021 strings of testdata/tiktoken_corpus.jsonl.gz with
// OpenAI's tiktoken; TestTiktokenGolden compares once its output is committed (it skips until then
// and prints the command). TestRegexPieces compares the splitter with the third-party Python regex
// module, and oracle_test.go with a generic backtracking matcher.
package tokenizer
