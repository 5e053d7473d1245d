package job_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/datasets/job"
)

// A job never deletes files it did not write. A folder holding a researcher's own Parquet files (the
// names pyarrow and Spark give: part-0.parquet, part-00000-<uuid>.snappy.parquet) runs a job beside them
// and leaves them byte for byte; a folder holding files named as a job's parts but no manifest is refused
// before anything is written or removed (starting a job there would tidy them away).
func TestJobKeepsForeignFiles(t *testing.T) {
	model := tinyModel(t)
	for _, tt := range []struct {
		name    string
		files   []string
		refused bool
	}{
		{"pyarrow and spark names", []string{"part-0.parquet", "part-00000-c0ffee.snappy.parquet", "part-00001.notes.parquet", "notes.txt"}, false},
		{"a job's part names without a manifest", []string{"part-00000.tokens.parquet", "part-00003.lens.parquet"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "job")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for i, n := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, n), []byte(strings.Repeat("x", i+1)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			j, err := openTinyJob(model, dir, job.Shard{0, 1}, 300)
			if err != nil {
				t.Fatal(err)
			}
			_, err = job.Run(context.Background(), j.eng, j.cfg, j.items)
			if tt.refused {
				if err == nil || !strings.Contains(err.Error(), "holds part files") || !strings.Contains(err.Error(), tt.files[0]) {
					t.Errorf("-want a refusal naming %s +got %v", tt.files[0], err)
				}
				if _, err := os.Stat(filepath.Join(dir, job.ManifestName)); err == nil {
					t.Errorf("a refused job wrote %s", job.ManifestName)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			for i, n := range tt.files {
				data, err := os.ReadFile(filepath.Join(dir, n))
				if err != nil || string(data) != strings.Repeat("x", i+1) {
					t.Errorf("%s after the job: %q, %v (want it untouched)", n, data, err)
				}
			}
		})
	}
}
