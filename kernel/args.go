package kernel

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/potato-k3/potato-k3/datasets/examples"
	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// Arg is an input or an option of Replay and Submit: Text, Texts, Chat, Example, Conversations and Tokens
// add sequences, in order (the order is their seq_id in the results); TopK, Hidden, Lens, LensAll,
// Router, AttnRes, Precision, Float16, Thinking and Label set options. An Arg that cannot apply (an
// unknown example, a thinking mode that is neither on nor off, no token ids) makes Replay and Submit
// fail before anything is sent; options the engine refuses (a layer outside the model, a top-k past its
// limit) come back as a *ServerError naming the option.
type Arg interface {
	apply(*api.Request) error
}

// argFunc adapts a function to Arg.
type argFunc func(*api.Request) error

func (f argFunc) apply(r *api.Request) error { return f(r) }

// Text replays raw text (no BOS is added; special-token names in it are plain text).
func Text(s string) Arg {
	return argFunc(func(r *api.Request) error {
		r.Inputs = append(r.Inputs, api.TextInput(s))
		return nil
	})
}

// Texts replays several raw texts, one sequence each.
func Texts(ss ...string) Arg {
	return argFunc(func(r *api.Request) error {
		for _, s := range ss {
			r.Inputs = append(r.Inputs, api.TextInput(s))
		}
		return nil
	})
}

// Tokens replays token ids as they are, one sequence. No ids at all is an error of Replay and Submit,
// before anything is sent (an id outside the vocabulary is the engine's, naming it).
func Tokens(ids ...int32) Arg {
	return argFunc(func(r *api.Request) error {
		if len(ids) == 0 {
			return fmt.Errorf("kernel: Tokens: no token ids: a sequence needs at least one")
		}
		r.Inputs = append(r.Inputs, api.Input{Tokens: slices.Clone(ids)})
		return nil
	})
}

// Example replays bundled example conversations by id, one sequence each, in order: the conversations
// of package datasets/examples (examples.IDs lists them). An unknown id is an error that lists the ids.
//
//	res, err := c.Replay(ctx, kernel.Example("greeting"), kernel.TopK(5))
func Example(ids ...string) Arg {
	return argFunc(func(r *api.Request) error {
		for _, id := range ids {
			conv, err := examples.Get(id)
			if err != nil {
				return fmt.Errorf("kernel: %w", err)
			}
			if err := Chat(conv).apply(r); err != nil {
				return err
			}
		}
		return nil
	})
}

// Chat replays one conversation rendered with the K3 chat format. Its thinking mode must be set, on the
// conversation or for the whole request with Thinking: the model's output depends on it, and the engine
// refuses a conversation without one (a value that is no thinking mode fails before sending).
func Chat(conv tokenizer.Conversation) Arg { return Conversations(conv) }

// Conversations replays several conversations, one sequence each (see Chat).
func Conversations(convs ...tokenizer.Conversation) Arg {
	return argFunc(func(r *api.Request) error {
		for i, c := range convs {
			raw, err := conversationJSON(c)
			if err != nil {
				return fmt.Errorf("kernel: conversation %d: %w", i, err)
			}
			r.Inputs = append(r.Inputs, api.Input{Conversation: raw})
		}
		return nil
	})
}

// wireConversation is a conversation in the common chat shape the engine reads: tokenizer.Conversation's
// own fields, plus "thinking", which it leaves out of its JSON because it has no default to write.
type wireConversation struct {
	tokenizer.Conversation
	Thinking *bool `json:"thinking,omitempty"`
}

// conversationJSON encodes c for the request.
func conversationJSON(c tokenizer.Conversation) (json.RawMessage, error) {
	w := wireConversation{Conversation: c}
	switch c.Thinking {
	case tokenizer.ThinkingOn, tokenizer.ThinkingOff:
		on := c.Thinking == tokenizer.ThinkingOn
		w.Thinking = &on
	case tokenizer.ThinkingUnset: // the request's Thinking, or the engine refuses it
	default:
		return nil, fmt.Errorf("unknown thinking mode %d", c.Thinking)
	}
	return json.Marshal(w)
}

// The thinking modes Thinking takes (tokenizer.ThinkingOn and ThinkingOff, here so that a cell needs no
// second import): kernel.Thinking(kernel.ThinkingOn).
const (
	ThinkingOn  = tokenizer.ThinkingOn
	ThinkingOff = tokenizer.ThinkingOff
)

// Thinking sets the thinking mode of every conversation of the request that does not set its own. A mode
// other than ThinkingOn or ThinkingOff makes Replay and Submit fail before sending; with no conversation
// among the inputs, or one that sets the other mode, the engine refuses the request.
func Thinking(t tokenizer.Thinking) Arg {
	return argFunc(func(r *api.Request) error {
		if t != tokenizer.ThinkingOn && t != tokenizer.ThinkingOff {
			return fmt.Errorf("kernel: Thinking: want kernel.ThinkingOn or kernel.ThinkingOff")
		}
		on := t == tokenizer.ThinkingOn
		r.Thinking = &on
		return nil
	})
}

// TopK keeps the k most probable next tokens at every position (in the tokens and lens tables). The
// engine refuses a negative k, and one past the vocabulary or its --max-top-k (Info's Limits.MaxTopK).
func TopK(k int) Arg {
	return argFunc(func(r *api.Request) error { r.Options.TopK = k; return nil })
}

// Hidden returns the hidden state (the running sum) after each of the given layers (0-indexed), one
// vector per token, in the hidden table. The engine refuses a layer outside the model (0..Info's
// Layers-1) or given twice, naming it; its rows come in layer order, whatever the order given.
func Hidden(layers ...int) Arg {
	return argFunc(func(r *api.Request) error {
		r.Options.Hidden = append(r.Options.Hidden, layers...)
		return nil
	})
}

// Lens reads the given layers (0-indexed) out through the model's output path (the logit lens), in the
// lens table. The engine refuses a layer outside the model or given twice, naming it; its rows come in
// layer order, whatever the order given.
func Lens(layers ...int) Arg {
	return argFunc(func(r *api.Request) error {
		r.Options.Lens = append(r.Options.Lens, layers...)
		return nil
	})
}

// LensAll reads every layer out through the logit lens.
func LensAll() Arg {
	return argFunc(func(r *api.Request) error { r.Options.LensAll = true; return nil })
}

// Router returns every MoE layer's expert choices and weights, in the router table.
func Router() Arg {
	return argFunc(func(r *api.Request) error { r.Options.Router = true; return nil })
}

// AttnRes returns the weights of every AttnRes mix, in the attnres table.
func AttnRes() Arg {
	return argFunc(func(r *api.Request) error { r.Options.AttnRes = true; return nil })
}

// Precision picks "bf16" (rounds where the reference model rounds; the default) or "fp32" (audits);
// the engine refuses any other name.
func Precision(p string) Arg {
	return argFunc(func(r *api.Request) error { r.Options.Precision = p; return nil })
}

// Float16 stores hidden vectors as float16 instead of float32, halving the hidden table.
func Float16() Arg {
	return argFunc(func(r *api.Request) error { r.Options.Float16 = true; return nil })
}

// Label names the job in its status and progress bar; it changes nothing else. A label longer than
// api.MaxLabelBytes (256 bytes) makes Replay and Submit fail before anything is sent, as the engine
// would refuse it.
func Label(s string) Arg {
	return argFunc(func(r *api.Request) error {
		if len(s) > api.MaxLabelBytes {
			return fmt.Errorf("kernel: Label: %d bytes: the engine's limit is %d bytes (api.MaxLabelBytes); a label is a short name for the job", len(s), api.MaxLabelBytes)
		}
		r.Label = s
		return nil
	})
}

// buildRequest applies args to a fresh request.
func buildRequest(args []Arg) (api.Request, error) {
	var r api.Request
	for _, a := range args {
		if a == nil {
			continue
		}
		if err := a.apply(&r); err != nil {
			return r, err
		}
	}
	if len(r.Inputs) == 0 {
		return r, fmt.Errorf("kernel: nothing to replay: give Text, Texts, Chat, Conversations, Example or Tokens")
	}
	return r, nil
}
