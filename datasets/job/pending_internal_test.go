package job

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Pending reads a job directory without writing or locking: every item where no directory or no
// manifest is, a refusal where part files lie without a manifest (Run would refuse to start there too),
// the items a manifest does not record as done, and a refusal for another job's or another shard's.
func TestPending(t *testing.T) {
	its := items(10, 20, 30)
	root := t.TempDir()
	cfg := Config{Dir: filepath.Join(root, "new"), Settings: Settings{TopK: 3}}
	got, err := Pending(cfg, its)
	if err != nil || len(got) != 3 {
		t.Fatalf("a directory that does not exist: %d items, %v", len(got), err)
	}
	if _, err := os.Stat(cfg.Dir); !os.IsNotExist(err) {
		t.Errorf("Pending made the directory: %v", err)
	}

	cfg.Dir = filepath.Join(root, "stray")
	os.MkdirAll(cfg.Dir, 0o755)
	os.WriteFile(filepath.Join(cfg.Dir, "part-00000.tokens.parquet"), []byte("x"), 0o644)
	if _, err := Pending(cfg, its); err == nil || !strings.Contains(err.Error(), "holds part files (part-00000.tokens.parquet) but no "+ManifestName) {
		t.Errorf("part files without a manifest: %v", err)
	}

	cfg.Dir = filepath.Join(root, "begun")
	os.MkdirAll(cfg.Dir, 0o755)
	m := &Manifest{Format: Format, Key: cfg.Settings.Key(), Settings: cfg.Settings, Shard: "0/1", Done: map[string]Done{"b": {}}}
	if err := m.write(cfg.Dir); err != nil {
		t.Fatal(err)
	}
	got, err = Pending(cfg, its)
	if err != nil || len(got) != 2 || got[0].ID != "a" || got[1].ID != "c" {
		t.Errorf("a job begun: %v, %v; want a and c", got, err)
	}
	before, _ := os.ReadFile(filepath.Join(cfg.Dir, ManifestName))
	other := cfg
	other.Settings.TopK = 4
	if _, err := Pending(other, its); err == nil || !strings.Contains(err.Error(), "holds a job with other settings") {
		t.Errorf("another job's directory: %v", err)
	}
	other = cfg
	other.Shard = Shard{1, 2}
	if _, err := Pending(other, its); err == nil || !strings.Contains(err.Error(), "holds shard 0/1, this job is shard 1/2") {
		t.Errorf("another shard's directory: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(cfg.Dir, ManifestName)); string(after) != string(before) {
		t.Error("Pending changed the manifest")
	}
}
