package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay/tables"
)

// --max-result-bytes counts what the results really hold until written: the audit's replay (1,000 random
// ids, every lens layer, top-k 1024) peaked at 820 MB written as Parquet, but the old estimate said 74
// MB and let it run under a limit of 500 MB. Held only, or as small tables, it runs.
func TestMaxResultBytesCountsTheTables(t *testing.T) {
	model := tinyModel(t)
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = fmt.Sprint(rng.IntN(3328))
	}
	audit := []string{"--tokens", strings.Join(ids, ","), "--lens", "all", "--top-k", "1024", "--max-result-bytes", "500MB"}
	for _, tt := range []struct {
		name string
		args []string
		want string // "" to run
	}{
		{"audit request as Parquet", append(audit, "--out", filepath.Join(dir, "a.parquet")),
			"in memory (0 hidden and 8 lens layers, top-k 1024, over every token): the limit is 500.0 MB (--max-result-bytes)"},
		{"small tables", []string{"--tokens", "1,2,3", "--top-k", "5", "--max-result-bytes", "100MB", "--out", filepath.Join(dir, "b.parquet")}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout bytes.Buffer
			err := run(context.Background(), append([]string{"replay", "--model", model, "--no-progress", "--show", "0"}, tt.args...), &stdout)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error: -want …%s… +got %v", tt.want, err)
			case tt.want != "" && strings.Contains(stdout.String(), "wrote"):
				t.Errorf("refused after writing:\n%s", stdout.String())
			}
		})
	}
	if _, err := os.Stat(tables.TablePath(filepath.Join(dir, "a.parquet"), tables.TokensTable)); err == nil {
		t.Errorf("the refused replay wrote its tables")
	}
}
