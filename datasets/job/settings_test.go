package job

import (
	"strings"
	"testing"
)

// TestSameJob: settings name one job when their keys agree; the checkpoint's fingerprint is compared
// only where both have one, so that a manifest written before it was a setting still resumes and merges.
func TestSameJob(t *testing.T) {
	base := Settings{Dataset: "d", ConfigHash: "c", Engine: "0.1.0", Precision: "bf16", Backend: "cpu", TopK: 3}
	with := func(w string, edit func(*Settings)) Settings {
		s := base
		s.Weights = w
		if edit != nil {
			edit(&s)
		}
		return s
	}
	for _, c := range []struct {
		name string
		a, b Settings
		same bool
	}{
		{"identical", with("w1", nil), with("w1", nil), true},
		{"other weights", with("w1", nil), with("w2", nil), false},
		{"a manifest without weights", with("", nil), with("w1", nil), true},
		{"the other way round", with("w1", nil), with("", nil), true},
		{"without weights, another setting", with("", nil), with("w1", func(s *Settings) { s.TopK = 4 }), false},
		{"neither has weights", with("", nil), with("", nil), true},
	} {
		if got := c.a.SameJob(c.b); got != c.same {
			t.Errorf("%s: SameJob %v, want %v", c.name, got, c.same)
		}
	}
	if d := strings.Join(with("w1", nil).Diff(with("w2", nil)), "; "); !strings.Contains(d, "weights_hash") || !strings.Contains(d, "other weights") {
		t.Errorf("Diff of other weights: %q", d)
	}
}
