package kernel

import (
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

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

// LookupTable tells a mistyped name from a table the job did not capture, both of which Table answers
// with nil, and says which names there are and which Arg captures a table.
func TestLookupTable(t *testing.T) {
	rec := func() arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema([]arrow.Field{{Name: "seq_id", Type: arrow.PrimitiveTypes.Int32}}, nil))
		defer b.Release()
		return b.NewRecordBatch()
	}
	r := &Result{Status: api.JobStatus{ID: "0123456789abcdef"}, tables: map[string]arrow.RecordBatch{"tokens": rec(), "lens": rec()}}
	defer r.Release()
	for _, tt := range []struct {
		name, table string
		is          error  // the sentinel the error wraps; nil for none
		want        string // the error, "<nil>" when the table is found
	}{
		{"tokens", "tokens", nil, "<nil>"},
		{"captured", "lens", nil, "<nil>"},
		{"not captured", "hidden", ErrNotCaptured,
			"kernel: table hidden not captured by job 0123456789abcdef (it has tokens, lens): ask for it with Hidden"},
		{"not captured, asked with an option of another name", "attnres", ErrNotCaptured,
			"kernel: table attnres not captured by job 0123456789abcdef (it has tokens, lens): ask for it with AttnRes"},
		{"mistyped", "lense", ErrNoTable, `kernel: no table "lense": the tables are tokens, lens, hidden, router, attnres`},
		{"capitalized", "Tokens", ErrNoTable, `kernel: no table "Tokens": the tables are tokens, lens, hidden, router, attnres`},
		{"empty", "", ErrNoTable, `kernel: no table "": the tables are tokens, lens, hidden, router, attnres`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.LookupTable(tt.table)
			if errText(err) != tt.want {
				t.Errorf("(-want +got):\n-%s\n+%s", tt.want, errText(err))
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v does not wrap %v", err, tt.is)
			}
			if got != r.Table(tt.table) {
				t.Errorf("LookupTable and Table disagree on %q", tt.table)
			}
		})
	}
	r.Release()
	if _, err := r.LookupTable("tokens"); errText(err) != "kernel: the result of job 0123456789abcdef was released: its tables are gone (Fetch or replay again)" {
		t.Errorf("after Release: %v", err)
	}
}
