package job

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	"github.com/potato-k3/potato-k3/datasets"
)

// Settings are everything that changes a job's rows: the dataset, the model, the engine, how the
// results are computed and what is kept of them. Their Key names the job in its manifest, so that a
// resumed job never mixes two settings, and merge refuses directories of different keys. What does not
// change a row (budgets, slices, expert chunks, wave sizes, the shard) is not in them.
type Settings struct {
	Dataset    string `json:"dataset_sha256"`   // SHA-256 of the dataset file
	ConfigHash string `json:"config_hash"`      // SHA-256 of the model's config.json
	Tokenizer  string `json:"tokenizer_sha256"` // SHA-256 of tiktoken.model and tokenizer_config.json ("" without)
	Engine     string `json:"engine_version"`
	Precision  string `json:"precision"`
	Backend    string `json:"backend"`
	Thinking   string `json:"thinking,omitempty"` // --thinking, for conversations that do not say
	TopK       int    `json:"top_k"`
	Hidden     []int  `json:"hidden,omitempty"`
	Lens       []int  `json:"lens,omitempty"`
	Router     bool   `json:"router,omitempty"`
	AttnRes    bool   `json:"attnres,omitempty"`
	Float16    bool   `json:"hidden_float16,omitempty"`
}

// keyDomain versions the key scheme and keeps it apart from any other SHA-256 of the same text.
const keyDomain = "potato-k3 dataset job v1\n"

// Key is the hex SHA-256 of the settings' canonical JSON.
func (s Settings) Key() string {
	canon, err := datasets.CanonicalJSON(s)
	if err != nil {
		panic(err) // a struct of strings, ints and bools always marshals
	}
	sum := sha256.Sum256(append([]byte(keyDomain), canon...))
	return hex.EncodeToString(sum[:])
}

// Diff lists the settings that differ between s and o as "name: a -> b", in name order.
func (s Settings) Diff(o Settings) []string {
	a, b := fields(s), fields(o)
	var names []string
	for k := range a {
		names = append(names, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	names = slices.Compact(names)
	var out []string
	for _, k := range names {
		if string(a[k]) != string(b[k]) {
			d := fmt.Sprintf("%s: %s -> %s", k, show(a[k]), show(b[k]))
			if k == "dataset_sha256" { // two hashes alone do not say what happened
				d += " (the dataset file's contents changed)"
			}
			out = append(out, d)
		}
	}
	return out
}

func fields(s Settings) map[string]json.RawMessage {
	data, _ := json.Marshal(s)
	var m map[string]json.RawMessage
	_ = json.Unmarshal(data, &m)
	return m
}

func show(raw json.RawMessage) string {
	if raw == nil {
		return "(unset)"
	}
	return string(raw)
}
