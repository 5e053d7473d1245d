package job_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/potato-k3/potato-k3/datasets/job"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// finishedJob runs the bundled examples as a job (tokens and lens tables, several parts) into a
// temporary directory, for a test to copy before it damages the copy.
func finishedJob(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fixture")
	j, err := openTinyJob(tinyModel(t), dir, job.Shard{Index: 0, Count: 1}, 700)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := job.Run(context.Background(), j.eng, j.cfg, j.items); err != nil {
		t.Fatal(err)
	}
	m, err := job.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Parts) < 3 || m.Parts[0].Files[tables.LensTable].Path == "" {
		t.Fatalf("the fixture job has %d parts, want 3 or more with lens tables", len(m.Parts))
	}
	return dir
}

// copyJob copies the job directory src to dst (plain files only).
func copyJob(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// editManifest rewrites dir's manifest after edit.
func editManifest(t *testing.T, dir string, edit func(*job.Manifest)) {
	t.Helper()
	m, err := job.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	edit(m)
	data, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, job.ManifestName), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// firstConversation is the id of a conversation of part (any one; the map's order does not matter).
func firstConversation(m *job.Manifest, part string) string {
	for id, d := range m.Done {
		if d.Part == part {
			return id
		}
	}
	return ""
}

// A job directory whose files or manifest are damaged is refused with the file at fault named, without
// a panic, and the tables at --out (an earlier merge's) stay exactly as they were.
func TestMergeRefusesDamagedJob(t *testing.T) {
	fixture := finishedJob(t)
	for _, tt := range []struct {
		name    string
		partial bool
		// damage breaks the copy at dir; root holds it and may hold other folders. It returns what the
		// error must contain.
		damage func(t *testing.T, root, dir string) []string
	}{
		{"missing first part file", false, func(t *testing.T, root, dir string) []string {
			os.Remove(filepath.Join(dir, "part-00000.tokens.parquet"))
			return []string{filepath.Join(dir, "part-00000.tokens.parquet")}
		}},
		{"missing lens part file", false, func(t *testing.T, root, dir string) []string {
			os.Remove(filepath.Join(dir, "part-00001.lens.parquet"))
			return []string{filepath.Join(dir, "part-00001.lens.parquet")}
		}},
		{"truncated part file", false, func(t *testing.T, root, dir string) []string {
			path := filepath.Join(dir, "part-00000.lens.parquet")
			st, _ := os.Stat(path)
			os.Truncate(path, st.Size()/2)
			return []string{path}
		}},
		{"not a Parquet file", false, func(t *testing.T, root, dir string) []string {
			path := filepath.Join(dir, "part-00002.lens.parquet")
			os.WriteFile(path, []byte("not parquet"), 0o644)
			return []string{path}
		}},
		{"damaged in place, size unchanged", false, func(t *testing.T, root, dir string) []string {
			path := filepath.Join(dir, "part-00001.tokens.parquet")
			data, _ := os.ReadFile(path)
			for i := len(data) / 3; i < len(data)/3+8; i++ {
				data[i] ^= 0xff
			}
			os.WriteFile(path, data, 0o644)
			return []string{path, "has changed since its job wrote it"}
		}},
		{"rows differ from the manifest", false, func(t *testing.T, root, dir string) []string {
			editManifest(t, dir, func(m *job.Manifest) {
				f := m.Parts[1].Files[tables.TokensTable]
				f.Rows++
				m.Parts[1].Files[tables.TokensTable] = f
			})
			return []string{filepath.Join(dir, "part-00001.tokens.parquet"), "rows"}
		}},
		{"a part holds rows the manifest does not place there", true, func(t *testing.T, root, dir string) []string {
			editManifest(t, dir, func(m *job.Manifest) {
				delete(m.Done, firstConversation(m, "part-00001"))
				m.Complete = false
			})
			return []string{filepath.Join(dir, "part-00001.tokens.parquet"), "rows"}
		}},
		{"a part without a table the others have", false, func(t *testing.T, root, dir string) []string {
			editManifest(t, dir, func(m *job.Manifest) { delete(m.Parts[2].Files, tables.LensTable) })
			return []string{"part-00002", "no lens table"}
		}},
		// The paths below lead to real copies of the parts outside the job directory, so that following
		// them would merge without a fault: only the check refuses them.
		{"conversation part outside the directory", false, func(t *testing.T, root, dir string) []string {
			copyJob(t, dir, filepath.Join(root, "elsewhere"))
			editManifest(t, dir, func(m *job.Manifest) {
				id := firstConversation(m, "part-00000")
				d := m.Done[id]
				d.Part = "../elsewhere/part-00000"
				m.Done[id] = d
			})
			return []string{"../elsewhere/part-00000", "not a plain name", filepath.Join(dir, job.ManifestName)}
		}},
		{"part name outside the directory", false, func(t *testing.T, root, dir string) []string {
			copyJob(t, dir, filepath.Join(root, "elsewhere"))
			editManifest(t, dir, func(m *job.Manifest) {
				for id, d := range m.Done {
					if d.Part == "part-00000" {
						d.Part = "../elsewhere/part-00000"
						m.Done[id] = d
					}
				}
				m.Parts[0].Name = "../elsewhere/part-00000"
			})
			return []string{"../elsewhere/part-00000", "not a plain name"}
		}},
		{"file path outside the directory", false, func(t *testing.T, root, dir string) []string {
			copyJob(t, dir, filepath.Join(root, "elsewhere"))
			editManifest(t, dir, func(m *job.Manifest) {
				f := m.Parts[0].Files[tables.TokensTable]
				f.Path = "../elsewhere/part-00000.tokens.parquet"
				m.Parts[0].Files[tables.TokensTable] = f
			})
			return []string{"../elsewhere/part-00000.tokens.parquet", "not a plain name"}
		}},
		{"absolute file path", false, func(t *testing.T, root, dir string) []string {
			abs := filepath.Join(root, "elsewhere")
			copyJob(t, dir, abs)
			editManifest(t, dir, func(m *job.Manifest) {
				f := m.Parts[0].Files[tables.LensTable]
				f.Path = filepath.Join(abs, "part-00000.lens.parquet")
				m.Parts[0].Files[tables.LensTable] = f
			})
			return []string{filepath.Join(abs, "part-00000.lens.parquet"), "not a plain name"}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "job")
			copyJob(t, fixture, dir)
			want := tt.damage(t, root, dir)
			outDir := filepath.Join(root, "out")
			os.Mkdir(outDir, 0o755)
			out := filepath.Join(outDir, "merged.parquet")
			old := map[string]string{tables.TokensTable: "an earlier merge's tokens", tables.LensTable: "an earlier merge's lens"}
			for name, data := range old {
				os.WriteFile(tables.TablePath(out, name), []byte(data), 0o644)
			}
			_, err := job.Merge(context.Background(), out, []string{dir}, job.MergeOptions{Partial: tt.partial})
			if err == nil {
				t.Fatalf("merge of a damaged job: no error, want one naming %q", want)
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error: -want %q in it +got %v", w, err)
				}
			}
			entries, _ := os.ReadDir(outDir)
			if len(entries) != len(old) {
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Errorf("after a failed merge the output folder holds %v, want the two earlier tables alone", names)
			}
			for name, data := range old {
				if got, _ := os.ReadFile(tables.TablePath(out, name)); string(got) != data {
					t.Errorf("a failed merge changed %s", tables.TablePath(out, name))
				}
			}
		})
	}
}

// Merge publishes its tables as one set: a merge that fails on its second table (lens) leaves the
// earlier set at --out whole, with its tokens table untouched; a merge without a lens table removes the
// earlier set's lens file; every table carries the set's MetaResultSet.
func TestMergeWritesOneSet(t *testing.T) {
	fixture := finishedJob(t)
	root := t.TempDir()
	out := filepath.Join(root, "out", "merged.parquet")
	os.Mkdir(filepath.Dir(out), 0o755)
	sum, err := job.Merge(context.Background(), out, []string{fixture}, job.MergeOptions{ResultSet: "aaaa"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Files) != 2 || sum.Rows[tables.TokensTable] == 0 || sum.Rows[tables.LensTable] == 0 {
		t.Errorf("summary: -want two files with rows +got %+v", sum)
	}
	checkSet(t, out, "aaaa", tables.TokensTable, tables.LensTable)
	before := folderBytes(t, filepath.Dir(out))

	// The lens file of part-00001 replaced by part-00000's (its manifest's rows and SHA-256 made to
	// match, so the up-front checks pass): the tokens table merges, the lens table fails half way.
	broken := filepath.Join(root, "broken")
	copyJob(t, fixture, broken)
	data, err := os.ReadFile(filepath.Join(broken, "part-00000.lens.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(broken, "part-00001.lens.parquet"), data, 0o644)
	editManifest(t, broken, func(m *job.Manifest) {
		f := m.Parts[1].Files[tables.LensTable]
		f.Rows, f.SHA256 = m.Parts[0].Files[tables.LensTable].Rows, m.Parts[0].Files[tables.LensTable].SHA256
		m.Parts[1].Files[tables.LensTable] = f
	})
	_, err = job.Merge(context.Background(), out, []string{broken}, job.MergeOptions{ResultSet: "bbbb"})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(broken, "part-00001.lens.parquet")) ||
		!strings.Contains(err.Error(), "nothing was replaced") {
		t.Errorf("merge failing on the lens table: -want an error naming part-00001.lens.parquet, nothing replaced +got %v", err)
	}
	if d := diffBytes(before, folderBytes(t, filepath.Dir(out))); d != "" {
		t.Errorf("a merge that failed on its second table changed the output folder: %s", d)
	}

	// The same job without its lens table: the earlier lens file goes with the rest of the earlier set.
	tokensOnly := filepath.Join(root, "tokens-only")
	copyJob(t, fixture, tokensOnly)
	editManifest(t, tokensOnly, func(m *job.Manifest) {
		for _, p := range m.Parts {
			os.Remove(filepath.Join(tokensOnly, p.Files[tables.LensTable].Path))
			delete(p.Files, tables.LensTable)
		}
	})
	if _, err := job.Merge(context.Background(), out, []string{tokensOnly}, job.MergeOptions{ResultSet: "cccc"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tables.TablePath(out, tables.LensTable)); err == nil {
		t.Errorf("%s, an earlier merge's, is still beside the new tokens table", tables.TablePath(out, tables.LensTable))
	}
	checkSet(t, out, "cccc", tables.TokensTable)
	if n := len(folderBytes(t, filepath.Dir(out))); n != 1 {
		t.Errorf("the output folder holds %d entries, want the tokens table alone", n)
	}
}

// checkSet reads the set at path and fails unless it holds exactly the tables names, each stamped with
// the result set id.
func checkSet(t *testing.T, path, id string, names ...string) {
	t.Helper()
	set, err := tables.ReadSet(path, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Release()
	if got := len(set.Tables()); got != len(names) {
		t.Errorf("%s: -want %d tables +got %d", path, len(names), got)
	}
	for _, name := range names {
		tb := set.Table(name)
		if tb == nil {
			t.Errorf("%s: no %s table", path, name)
			continue
		}
		md := tb.Schema.Metadata()
		got := ""
		if i := md.FindKey(tables.MetaResultSet); i >= 0 {
			got = md.Values()[i]
		}
		if got != id {
			t.Errorf("%s: %s: %s -want %q +got %q", path, name, tables.MetaResultSet, id, got)
		}
		for _, key := range []string{tables.MetaResultSet, tables.MetaRequestHash} { // the keys a merge stamps
			if i := md.FindKey(key); i < 0 || md.Values()[i] == "" {
				t.Errorf("%s: %s: no %s", path, name, key)
			}
		}
	}
}

// folderBytes maps every entry of dir to its bytes ("" for a folder).
func folderBytes(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		out[e.Name()] = string(b)
	}
	return out
}

// diffBytes describes how two folderBytes differ (-gone, +new, ~changed), or returns "".
func diffBytes(want, got map[string]string) string {
	var d []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			d = append(d, "-"+k)
		} else if g != v {
			d = append(d, "~"+k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d = append(d, "+"+k)
		}
	}
	return strings.Join(d, " ")
}

// A stopped merge writes nothing: the earlier set at --out stays byte for byte, and the error is the
// context's.
func TestMergeStopped(t *testing.T) {
	fixture := finishedJob(t)
	out := filepath.Join(t.TempDir(), "merged.parquet")
	if _, err := job.Merge(context.Background(), out, []string{fixture}, job.MergeOptions{ResultSet: "aaaa"}); err != nil {
		t.Fatal(err)
	}
	before := folderBytes(t, filepath.Dir(out))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := job.Merge(ctx, out, []string{fixture}, job.MergeOptions{ResultSet: "bbbb"}); !errors.Is(err, context.Canceled) {
		t.Errorf("stopped merge: %v, want context.Canceled", err)
	}
	if d := diffBytes(before, folderBytes(t, filepath.Dir(out))); d != "" {
		t.Errorf("a stopped merge changed the output folder: %s", d)
	}
}
