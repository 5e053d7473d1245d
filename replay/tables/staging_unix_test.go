//go:build unix

package tables

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/potato-k3/potato-k3/internal/staging"
)

// A write of a set removes the staging directories that killed writers of the same set left, and keeps
// the ones a live writer holds, those without an owner file and those of other sets.
func TestWriteSetSweepsAbandonedStaging(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "res.arrow")
	mkStaging := func(name string, owner bool) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "res.hidden.arrow"), make([]byte, 1<<16), 0o644); err != nil {
			t.Fatal(err)
		}
		if owner {
			if err := os.WriteFile(filepath.Join(p, staging.OwnerFile), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	killed := mkStaging(".res.arrow.111.tmp", true)      // its writer died: the owner file's flock is free
	st, err := staging.Mkdir(dir, ".res.arrow.", ".tmp") // a writer still at work
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release()
	live := st.Path
	ownerless := mkStaging(".res.arrow.333.tmp", false)
	other := mkStaging(".other.arrow.444.tmp", true)

	set, err := Build(makeResults(5, 4, spec{seq: 1, tokens: 5}), Options{Allocator: checkedAlloc(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Release()
	if _, err := WriteSet(t.Context(), path, set); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(killed); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the killed writer's staging directory is still there (%v)", err)
	}
	for _, kept := range []string{live, ownerless, other} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("%s was removed: %v", filepath.Base(kept), err)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries { // the write's own staging directory is gone after it
		if n := e.Name(); n != filepath.Base(live) && n != filepath.Base(ownerless) && n != filepath.Base(other) &&
			filepath.Ext(n) == ".tmp" {
			t.Errorf("left behind: %s", n)
		}
	}
}
