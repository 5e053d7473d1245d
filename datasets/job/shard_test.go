package job_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/datasets/job"
)

// Every conversation falls in exactly one of N shards, for every N, and the shards are near even.
func TestShardCoverage(t *testing.T) {
	ids := make([]string, 10000)
	for i := range ids {
		ids[i] = fmt.Sprintf("line:%d", i+1)
		if i%3 == 0 {
			ids[i] = fmt.Sprintf("conv-%06d", i)
		}
	}
	for _, n := range []int{1, 2, 3, 7, 16} {
		counts := make([]int, n)
		for _, id := range ids {
			in := 0
			for i := 0; i < n; i++ {
				if (job.Shard{Index: i, Count: n}).Has(id) {
					in++
					counts[i]++
				}
			}
			if in != 1 {
				t.Fatalf("N=%d: %s is in %d shards, want 1", n, id, in)
			}
		}
		for i, c := range counts {
			if even := len(ids) / n; c < even*8/10 || c > even*12/10 {
				t.Errorf("N=%d: shard %d holds %d of %d conversations, far from %d", n, i, c, len(ids), even)
			}
		}
	}
	// The shard depends on the id alone: these values are fixed for all time (manifests rely on them).
	for id, want := range map[string]int{"greeting": 0, "line:2": 1, "tool-weather": 1, "row:7": 2} {
		if got := job.ShardOf(id, 3); got != want {
			t.Errorf("ShardOf(%q, 3) = %d, want %d: the shard of a conversation must never change", id, got, want)
		}
	}
}

func TestParseShard(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want job.Shard
		err  bool
	}{
		{"", job.Shard{0, 1}, false}, {"0/1", job.Shard{0, 1}, false}, {"2/3", job.Shard{2, 3}, false},
		{"3/3", job.Shard{}, true}, {"-1/3", job.Shard{}, true}, {"1", job.Shard{}, true}, {"a/b", job.Shard{}, true},
		{"0/0", job.Shard{}, true},
	} {
		got, err := job.ParseShard(tt.in)
		if (err != nil) != tt.err || (!tt.err && got != tt.want) {
			t.Errorf("ParseShard(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

// Every setting that changes a row changes the key, and Diff names it.
func TestKeyCoversSettings(t *testing.T) {
	base := job.Settings{Dataset: "d", ConfigHash: "c", Tokenizer: "t", Engine: "0.1.0", Precision: "bf16", Backend: "cpu", TopK: 5}
	for name, change := range map[string]func(*job.Settings){
		"dataset_sha256":   func(s *job.Settings) { s.Dataset = "e" },
		"config_hash":      func(s *job.Settings) { s.ConfigHash = "x" },
		"weights_hash":     func(s *job.Settings) { s.Weights = "x" },
		"tokenizer_sha256": func(s *job.Settings) { s.Tokenizer = "x" },
		"engine_version":   func(s *job.Settings) { s.Engine = "0.2.0" },
		"precision":        func(s *job.Settings) { s.Precision = "fp32" },
		"backend":          func(s *job.Settings) { s.Backend = "cuda" },
		"thinking":         func(s *job.Settings) { s.Thinking = "on" },
		"top_k":            func(s *job.Settings) { s.TopK = 6 },
		"hidden":           func(s *job.Settings) { s.Hidden = []int{3} },
		"lens":             func(s *job.Settings) { s.Lens = []int{3} },
		"router":           func(s *job.Settings) { s.Router = true },
		"attnres":          func(s *job.Settings) { s.AttnRes = true },
		"hidden_float16":   func(s *job.Settings) { s.Float16 = true },
	} {
		s := base
		change(&s)
		if s.Key() == base.Key() {
			t.Errorf("changing %s leaves the key", name)
		}
		if d := base.Diff(s); len(d) != 1 || !strings.HasPrefix(d[0], name+":") {
			t.Errorf("changing %s: Diff = %q", name, d)
		}
	}
	if base.Key() != (job.Settings{Dataset: "d", ConfigHash: "c", Tokenizer: "t", Engine: "0.1.0", Precision: "bf16", Backend: "cpu", TopK: 5}).Key() {
		t.Error("the key is not a function of the settings")
	}
}
