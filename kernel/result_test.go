package kernel

import (
	"testing"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// Summary names no wave number (the engine's count since it started), only the jobs a pass was shared
// with.
func TestResultSummary(t *testing.T) {
	st := api.JobStatus{ID: "j", Sequences: 2, Tokens: 130, Precision: "bf16"}
	for _, tt := range []struct {
		name      string
		wave      *api.Wave
		fromCache bool
		want      string
	}{
		{"alone", &api.Wave{ID: 7, Jobs: []string{"j"}, Tokens: 130},
			false, "job j · 2 sequences · 130 tokens · bf16 · tables: "},
		{"shared", &api.Wave{ID: 7, Jobs: []string{"i", "j", "k"}, Tokens: 1234},
			false, "job j · 2 sequences · 130 tokens · bf16 · one pass over the weights with 2 other jobs (1,234 tokens in all) · tables: "},
		{"shared with one", &api.Wave{ID: 7, Jobs: []string{"i", "j"}, Tokens: 200},
			true, "job j · 2 sequences · 130 tokens · bf16 · one pass over the weights with 1 other job (200 tokens in all) · tables:  · from the results cache"},
		{"no wave", nil, false, "job j · 2 sequences · 130 tokens · bf16 · tables: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := st
			s.Wave = tt.wave
			r := &Result{Status: s, FromCache: tt.fromCache}
			if got := r.Summary(); got != tt.want {
				t.Errorf("(-want +got):\n-%s\n+%s", tt.want, got)
			}
		})
	}
}
