package main

import (
	"bytes"
	"crypto/sha256"
	_ "embed" // the handwritten conversations
	"encoding/json"
	"fmt"
	"strings"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// handwritten holds conversations written for this project (the repository's license): everyday
// questions, a little code, explanations, some with reasoning. None is one of the bundled examples
// (datasets/examples), which the demo model is measured on.
//
//go:embed conversations.jsonl
var handwritten []byte

// line is one line of conversations.jsonl.
type line struct {
	ID       string              `json:"id"`
	Thinking bool                `json:"thinking"`
	Messages []tokenizer.Message `json:"messages"`
}

// conversations returns the handwritten conversations and the generated ones, in a fixed order, and
// the manifest entry that describes them (its token counts filled in by the caller).
func conversations() ([]tokenizer.Conversation, source, error) {
	var out []tokenizer.Conversation
	dec := json.NewDecoder(bytes.NewReader(handwritten))
	dec.DisallowUnknownFields()
	for n := 1; dec.More(); n++ {
		var l line
		if err := dec.Decode(&l); err != nil {
			return nil, source{}, fmt.Errorf("conversations.jsonl: conversation %d: %w", n, err)
		}
		th := tokenizer.ThinkingOff
		if l.Thinking {
			th = tokenizer.ThinkingOn
		}
		out = append(out, tokenizer.Conversation{ID: l.ID, Messages: l.Messages, Thinking: th})
	}
	hand := len(out)
	// The handwritten conversations are short: they enter three times, interleaved with the generated
	// ones (a repeat stays in the split of its first occurrence: see writer.add).
	gen := generated()
	var all []tokenizer.Conversation
	for i, c := range gen {
		all = append(all, c)
		if i%8 == 0 && i/8 < 3*hand {
			all = append(all, out[(i/8)%hand])
		}
	}
	return all, source{
		Name:    fmt.Sprintf("conversations written for this project: %d handwritten (replay/demomodel/internal/corpus/conversations.jsonl, x3) and %d generated (gen.go)", hand, len(gen)),
		License: "this repository's license (written for the project)",
		Bytes:   len(handwritten),
		SHA256:  fmt.Sprintf("%x", sha256.Sum256(handwritten)),
	}, nil
}

var (
	systems = []string{"", "", "You are a helpful assistant.", "You are a concise assistant. Answer briefly.",
		"You are a friendly tutor who explains things step by step.", "Answer in plain English."}
	numberWords = []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
		"eleven", "twelve"}
	days   = []string{"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}
	months = []string{"January", "February", "March", "April", "May", "June", "July", "August", "September",
		"October", "November", "December"}
	words = []string{"apple", "banana", "river", "window", "garden", "pencil", "mountain", "letter", "summer",
		"library", "kitchen", "bicycle", "orange", "planet", "music", "coffee", "bridge", "forest", "island", "rabbit"}
)

// rng is a small deterministic generator (xorshift) so the corpus is the same on every run.
type rng uint64

func (r *rng) intn(n int) int {
	*r ^= *r << 13
	*r ^= *r >> 7
	*r ^= *r << 17
	return int(uint64(*r) % uint64(n))
}

// generated returns templated conversations whose answers are computed, so every one is correct.
func generated() []tokenizer.Conversation {
	r := rng(0x9e3779b97f4a7c15)
	var out []tokenizer.Conversation
	add := func(kind, user, reasoning, answer string) {
		th := tokenizer.ThinkingOff
		if r.intn(3) == 0 {
			th = tokenizer.ThinkingOn
		} else {
			reasoning = ""
		}
		var msgs []tokenizer.Message
		if s := systems[r.intn(len(systems))]; s != "" {
			msgs = append(msgs, tokenizer.Message{Role: tokenizer.RoleSystem, Content: s})
		}
		msgs = append(msgs, tokenizer.Message{Role: tokenizer.RoleUser, Content: user},
			tokenizer.Message{Role: tokenizer.RoleAssistant, Content: answer, Reasoning: reasoning})
		out = append(out, tokenizer.Conversation{ID: fmt.Sprintf("gen-%s-%d", kind, len(out)), Messages: msgs, Thinking: th})
	}
	for range 1500 {
		switch r.intn(6) {
		case 0:
			a, b := r.intn(90)+2, r.intn(90)+2
			q := []string{"What is %d plus %d?", "Can you add %d and %d for me?", "%d + %d = ?", "Please compute %d + %d."}[r.intn(4)]
			add("add", fmt.Sprintf(q, a, b), fmt.Sprintf("The user wants the sum of %d and %d. %d + %d = %d.", a, b, a, b, a+b),
				fmt.Sprintf([]string{"%d plus %d is %d.", "The sum of %d and %d is %d.", "%d + %d = %d."}[r.intn(3)], a, b, a+b))
		case 1:
			a, b := r.intn(12)+2, r.intn(12)+2
			q := []string{"What is %d times %d?", "How much is %d multiplied by %d?", "%d x %d?"}[r.intn(3)]
			add("mul", fmt.Sprintf(q, a, b), fmt.Sprintf("%d times %d: %d groups of %d make %d.", a, b, a, b, a*b),
				fmt.Sprintf([]string{"%d times %d is %d.", "%d multiplied by %d equals %d."}[r.intn(2)], a, b, a*b))
		case 2:
			w := words[r.intn(len(words))]
			letter := w[r.intn(len(w))]
			n := strings.Count(w, string(letter))
			add("count", fmt.Sprintf("How many times does the letter %q appear in the word %q?", string(letter), w),
				fmt.Sprintf("Spell %s: %s. The letter %c appears %d time%s.", w, strings.Join(strings.Split(w, ""), "-"), letter, n, plural(n)),
				fmt.Sprintf("The letter %q appears %s time%s in %q.", string(letter), numberWords[n], plural(n), w))
		case 3:
			d, k := r.intn(7), r.intn(6)+1
			add("days", fmt.Sprintf("If today is %s, what day will it be in %d day%s?", days[d], k, plural(k)),
				fmt.Sprintf("Counting %d day%s forward from %s gives %s.", k, plural(k), days[d], days[(d+k)%7]),
				fmt.Sprintf("In %s day%s it will be %s.", numberWords[k], plural(k), days[(d+k)%7]))
		case 4:
			m := r.intn(12)
			add("months", fmt.Sprintf("Which month comes after %s?", months[m]),
				fmt.Sprintf("The months in order: %s comes right before %s.", months[m], months[(m+1)%12]),
				fmt.Sprintf("%s comes after %s.", months[(m+1)%12], months[m]))
		case 5:
			km := r.intn(40) + 1
			add("units", fmt.Sprintf("How many metres are there in %d kilometres?", km),
				fmt.Sprintf("One kilometre is 1000 metres, so %d kilometres are %d metres.", km, km*1000),
				fmt.Sprintf("%d kilometres are %d metres, since one kilometre is 1000 metres.", km, km*1000))
		}
	}
	return out
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
