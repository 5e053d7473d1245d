//go:build unix

package demomodel

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/internal/staging"
)

// abandonedStaging makes in root what a Dir killed mid-write leaves: a temporary directory with part of
// the model and an owner file whose lock nobody holds.
func abandonedStaging(t *testing.T, root, name string) string {
	t.Helper()
	p := filepath.Join(root, name)
	if err := os.MkdirAll(p, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", ".owner"} {
		if err := os.WriteFile(filepath.Join(p, f), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// Dir removes the temporary directories that writers killed mid-write left in the cache root, on the
// call that writes the model and on one that finds it cached, and never one a live writer holds or one
// without an owner file; the cached copy holds no owner file.
func TestDirSweepsAbandonedStaging(t *testing.T) {
	root := t.TempDir()
	t.Setenv("POTATO_CACHE", root)
	killed := abandonedStaging(t, root, stagingPrefix+"111")
	live, err := staging.Mkdir(root, stagingPrefix, "") // a writer still at work
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release()
	ownerless := filepath.Join(root, stagingPrefix+"333")
	if err := os.Mkdir(ownerless, 0o700); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	dir, err := Dir(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(killed); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the killed writer's %s is still there (%v)", filepath.Base(killed), err)
	}
	for _, kept := range []string{live.Path, ownerless} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("%s was removed: %v", filepath.Base(kept), err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".owner") {
			t.Errorf("the cached model holds %s", e.Name())
		}
	}

	// Another writer, killed while this one published: the next call, which writes nothing, removes it.
	killed = abandonedStaging(t, root, stagingPrefix+"444")
	if again, err := Dir(ctx, nil); err != nil || again != dir {
		t.Fatalf("second Dir: %s %v, want %s", again, err, dir)
	}
	if _, err := os.Stat(killed); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a cached call left the killed writer's %s (%v)", filepath.Base(killed), err)
	}
	if _, err := os.Stat(live.Path); err != nil {
		t.Errorf("a cached call removed the live writer's %s: %v", filepath.Base(live.Path), err)
	}
}
