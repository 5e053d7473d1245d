package replay

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
)

// Sequence is one token sequence to replay, with what the tokenizer knows about each token. Only Tokens
// is required; the other slices are either empty or as long as Tokens.
type Sequence struct {
	Tokens   []int32
	Pieces   []string
	Messages []int32
	Channels []string
	// Conversation and Thinking describe a sequence rendered from a conversation: its id (from the input,
	// else its line or item number) and its thinking mode, "on" or "off". Both are "" otherwise.
	Conversation string
	Thinking     string
}

// Options choose what a request gets back beyond the per-token statistics. They never change a result.
type Options struct {
	TopK    int   // alternatives kept per position (default 0: none)
	Hidden  []int // layers (0-indexed) whose running sum is returned per token
	Lens    []int // layers (0-indexed) read out through the output mix, norm and lm_head
	Router  bool  // return every MoE layer's expert choices
	AttnRes bool  // return every AttnRes mix's weights
}

// Request is one caller's sequences and options; a wave may carry several requests.
type Request struct {
	Sequences []Sequence
	Options   Options
}

// Limits bound what a request may ask, so that a request is refused with the limit named instead of
// exhausting memory.
type Limits struct {
	MaxTokens   int // per sequence; 0: no limit
	MaxSequence int // sequences per request; 0: no limit
}

// Validate checks a request against the model's vocabulary and layer count and the limits.
func (r *Request) Validate(vocab, layers int, lim Limits) error {
	if len(r.Sequences) == 0 {
		return fmt.Errorf("request: no sequences")
	}
	if lim.MaxSequence > 0 && len(r.Sequences) > lim.MaxSequence {
		return fmt.Errorf("request: %d sequences, the limit is %d", len(r.Sequences), lim.MaxSequence)
	}
	o := r.Options
	if o.TopK < 0 || o.TopK > vocab {
		return fmt.Errorf("request: top_k %d outside 0..%d (the vocabulary size)", o.TopK, vocab)
	}
	for _, list := range []struct {
		name   string
		layers []int
	}{{"hidden", o.Hidden}, {"lens", o.Lens}} {
		if err := CheckLayers(list.layers, layers); err != nil {
			return fmt.Errorf("request: %s: %w", list.name, err)
		}
	}
	for i, s := range r.Sequences {
		n := len(s.Tokens)
		if n == 0 {
			return fmt.Errorf("request: sequence %d is empty", i)
		}
		if lim.MaxTokens > 0 && n > lim.MaxTokens {
			return fmt.Errorf("request: sequence %d has %d tokens, the limit is %d", i, n, lim.MaxTokens)
		}
		for name, l := range map[string]int{"pieces": len(s.Pieces), "messages": len(s.Messages), "channels": len(s.Channels)} {
			if l != 0 && l != n {
				return fmt.Errorf("request: sequence %d: %d %s for %d tokens", i, l, name, n)
			}
		}
		for t, id := range s.Tokens {
			if id < 0 || int(id) >= vocab {
				return fmt.Errorf("request: sequence %d position %d: token id %d outside the vocabulary 0..%d", i, t, id, vocab-1)
			}
		}
	}
	return nil
}

// LayerError is a layer list's refusal by CheckLayers: the entry at Index holds Layer, which is outside
// the model (Repeat false) or given before (Repeat true).
type LayerError struct {
	Index, Layer, Layers int
	Repeat               bool
}

func (e *LayerError) Error() string {
	if e.Repeat {
		return fmt.Sprintf("layer %d appears twice (give each layer once)", e.Layer)
	}
	return fmt.Sprintf("layer %d outside 0..%d (layers are 0-indexed; the model has %d)", e.Layer, e.Layers-1, e.Layers)
}

// CheckLayers is the one rule for a layer list (Options.Hidden, Options.Lens), in the CLI, the service and
// the engine: every entry is a layer of the model (0..layers-1) and none is given twice, in any order. A
// repeat is refused rather than dropped, so that what was asked is what the tables hold.
func CheckLayers(list []int, layers int) error {
	seen := make(map[int]bool, len(list))
	for i, l := range list {
		if l < 0 || l >= layers {
			return &LayerError{Index: i, Layer: l, Layers: layers}
		}
		if seen[l] {
			return &LayerError{Index: i, Layer: l, Layers: layers, Repeat: true}
		}
		seen[l] = true
	}
	return nil
}

// union merges the layer lists of several requests, sorted and without repeats.
func union(lists ...[]int) []int {
	var out []int
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Hash is the SHA-256, in hexadecimal, of the request's JSON encoding (every sequence's tokens, pieces,
// messages and channels, and the options): equal requests have equal hashes, whatever produced them.
func (r *Request) Hash() string {
	data, _ := json.Marshal(r) // plain slices, strings, ints and bools: Marshal cannot fail
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
