package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// potato merge stamps its set with a fresh result-set id, and every failure, a damaged part file
// included (which panicked with exit 2 before), is an error that exits 1, names the file and leaves the
// earlier merged set as it was.
func TestMergeCLI(t *testing.T) {
	model := tinyModel(t)
	data := smallDataset(t, 6)
	root := t.TempDir()
	dir := filepath.Join(root, "job") + "/"
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"replay", "--model", model, "--chat", data, "--thinking", "off", "--top-k", "3",
		"--lens", "1", "--no-progress", "--wave-tokens", "400", "--out", dir}, &stdout); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(root, "out", "merged.parquet")
	if err := os.Mkdir(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for range 2 {
		if err := run(context.Background(), []string{"merge", "--out", out, dir}, &stdout); err != nil {
			t.Fatal(err)
		}
		set, err := tables.ReadSet(out, memory.DefaultAllocator) // refuses tables of two sets
		if err != nil {
			t.Fatal(err)
		}
		for _, tb := range set.Tables() {
			md := tb.Schema.Metadata()
			for _, key := range tables.ProvenanceKeys { // every key, as replay's sets carry them
				if i := md.FindKey(key); i < 0 || md.Values()[i] == "" {
					t.Errorf("merged %s table: no %s", tb.Name, key)
				}
			}
			if i := md.FindKey(tables.MetaResultSet); i < 0 || md.Values()[i] == "" {
				t.Errorf("merged %s table: no %s", tb.Name, tables.MetaResultSet)
			} else {
				ids[md.Values()[i]] = true
			}
		}
		if len(set.Tables()) != 2 {
			t.Errorf("merged set: -want tokens and lens +got %d tables", len(set.Tables()))
		}
		set.Release()
	}
	if len(ids) != 2 {
		t.Errorf("two merges gave the result-set ids %v, want one fresh id each", ids)
	}
	before := map[string][]byte{}
	for _, name := range []string{tables.TokensTable, tables.LensTable} {
		b, err := os.ReadFile(tables.TablePath(out, name))
		if err != nil {
			t.Fatal(err)
		}
		before[name] = b
	}

	// --out is refused before any job directory is read (here they do not exist): before, a missing
	// directory failed at the write, after every part was read
	for _, tt := range []struct{ out, want string }{
		{filepath.Join(root, "none", "m.parquet"), "merge: --out " + filepath.Join(root, "none", "m.parquet") + ": directory " + filepath.Join(root, "none") + " does not exist"},
		{filepath.Join(root, "m.csv"), `merge: --out ` + filepath.Join(root, "m.csv") + `: unknown extension ".csv"`},
		{filepath.Join(root, ".parquet"), "no file name before the extension"},
	} {
		err := run(context.Background(), []string{"merge", "--out", tt.out, filepath.Join(root, "no-job")}, &stdout)
		if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("merge --out %s: -want …%s…, exit 1 +got %v", tt.out, tt.want, err)
		}
	}

	for _, tt := range []struct {
		name   string
		damage func(dir string) string // returns the file the error must name
	}{
		{"missing first part", func(dir string) string {
			p := filepath.Join(dir, "part-00000.tokens.parquet")
			os.Remove(p)
			return p
		}},
		{"truncated lens part", func(dir string) string {
			p := filepath.Join(dir, "part-00000.lens.parquet")
			os.Truncate(p, 100)
			return p
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			broken := filepath.Join(t.TempDir(), "job")
			if err := os.CopyFS(broken, os.DirFS(dir)); err != nil {
				t.Fatal(err)
			}
			file := tt.damage(broken)
			err := run(context.Background(), []string{"merge", "--out", out, broken}, &stdout)
			if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), file) {
				t.Errorf("merge of a damaged job: -want an error naming %s, exit 1 +got %v", file, err)
			}
			entries, _ := os.ReadDir(filepath.Dir(out))
			if len(entries) != len(before) {
				t.Errorf("the output folder holds %d entries after a failed merge, want %d", len(entries), len(before))
			}
			for name, b := range before {
				if now, _ := os.ReadFile(tables.TablePath(out, name)); !bytes.Equal(now, b) {
					t.Errorf("a failed merge changed %s", tables.TablePath(out, name))
				}
			}
		})
	}
}
