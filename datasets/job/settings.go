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
	Dataset    string `json:"dataset_sha256"` // SHA-256 of the dataset file
	ConfigHash string `json:"config_hash"`    // SHA-256 of the model's config.json
	// Weights is the checkpoint's fingerprint (replay.Engine.WeightsSHA256), which tells apart two
	// checkpoints of one config.json (a base and an instruct model). Manifests written before it was a
	// setting have none; SameJob then leaves it out of the comparison.
	Weights   string `json:"weights_hash,omitempty"`
	Tokenizer string `json:"tokenizer_sha256"` // SHA-256 of tiktoken.model and tokenizer_config.json ("" without)
	Engine    string `json:"engine_version"`
	Precision string `json:"precision"`
	Backend   string `json:"backend"`
	Thinking  string `json:"thinking,omitempty"` // --thinking, for conversations that do not say
	TopK      int    `json:"top_k"`
	Hidden    []int  `json:"hidden,omitempty"`
	Lens      []int  `json:"lens,omitempty"`
	Router    bool   `json:"router,omitempty"`
	AttnRes   bool   `json:"attnres,omitempty"`
	Float16   bool   `json:"hidden_float16,omitempty"`
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

// SameJob says that settings s and o name one job: the same Key, or, where one of them predates the
// checkpoint's fingerprint (Weights empty), the same Key with the other's Weights left out too, so that a
// job begun by an earlier version resumes and merges as before.
func (s Settings) SameJob(o Settings) bool {
	if s.Key() == o.Key() {
		return true
	}
	if s.Weights == "" || o.Weights == "" {
		s.Weights, o.Weights = "", ""
		return s.Key() == o.Key()
	}
	return false
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
			switch k { // two hashes alone do not say what happened
			case "dataset_sha256":
				d += " (the dataset file's contents changed)"
			case "weights_hash":
				d += " (other weights: another checkpoint, or this one changed)"
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
