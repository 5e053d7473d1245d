package job_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/datasets/job"
)

// The first line of a job names its wave budget; a conversation past it runs as a wave of its own
// (Pack), and the line says so: it said "waves of at most 70 tokens" of a job whose wave held 84.
func TestRunLogWaveBudget(t *testing.T) {
	model := tinyModel(t)
	for _, budget := range []int{300, 1 << 20} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			j, err := openTinyJob(model, filepath.Join(t.TempDir(), "job"), job.Shard{Index: 0, Count: 1}, budget)
			if err != nil {
				t.Fatal(err)
			}
			j.items = j.items[:6] // enough for both cases, quicker
			longer, longest := 0, 0
			for _, it := range j.items {
				if n := len(it.Sequence.Tokens); n > budget {
					longer, longest = longer+1, max(longest, n)
				}
			}
			if (budget == 300) != (longer > 0) {
				t.Fatalf("budget %d: %d conversations longer: the case tests nothing", budget, longer)
			}
			var logs []string
			j.cfg.Log = func(s string) { logs = append(logs, s) }
			if _, err := job.Run(context.Background(), j.eng, j.cfg, j.items); err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("of at most %d tokens into", budget)
			if longer > 0 {
				convs := fmt.Sprintf("%d conversations", longer)
				if longer == 1 {
					convs = "1 conversation"
				}
				want = fmt.Sprintf("of at most %d tokens (%s longer than that, up to %d tokens, each a wave of its own) into", budget, convs, longest)
			}
			if budget >= 1000 {
				want = "of at most 1,048,576 tokens into"
			}
			if len(logs) == 0 || !strings.Contains(logs[0], want) {
				t.Errorf("first line: -want …%s… +got %q", want, logs)
			}
		})
	}
}
