//go:build unix

package synth

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/internal/diskspace"
	"github.com/potato-k3/potato-k3/internal/staging"
)

// mkLeftover makes a directory in parent as a writer leaves it: a file of data, and the owner file
// (unlocked: its writer is gone) when owner is set.
func mkLeftover(t *testing.T, parent, name string, owner bool) string {
	t.Helper()
	p := filepath.Join(parent, name)
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "model-00001-of-000004.safetensors"), make([]byte, 1<<16), 0o644); err != nil {
		t.Fatal(err)
	}
	if owner {
		if err := os.WriteFile(filepath.Join(p, staging.OwnerFile), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// A Write removes the temporary directories that killed writers of the same directory left, before it
// counts the space, and keeps a live writer's, one without an owner file, and those of other names; the
// directory it publishes holds no owner file.
func TestWriteSweepsAbandonedStaging(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "m")
	killed := mkLeftover(t, parent, ".m.synth-111", true)
	live, err := staging.Mkdir(parent, ".m.synth-", "") // a writer still at work
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release()
	ownerless := mkLeftover(t, parent, ".m.synth-333", false)
	otherName := mkLeftover(t, parent, ".mm.synth-444", true)
	notDigits := mkLeftover(t, parent, ".m.synth-x.synth-555", true) // a write of "m.synth-x", not of "m"

	if _, err := Write(context.Background(), dir, Options{Preset: "tiny", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(killed); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the killed writer's temporary directory is still there (%v)", err)
	}
	for _, kept := range []string{live.Path, ownerless, otherName, notDigits} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("%s was removed: %v", filepath.Base(kept), err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), staging.OwnerFile) {
			t.Errorf("the published directory holds %s", e.Name())
		}
	}
	if got, err := DirDigest(context.Background(), dir); err != nil || got != DefaultDigest {
		t.Errorf("DirDigest of the written default: -want %s +got %s (%v)", DefaultDigest, got, err)
	}
	left, want := staging.Left(parent, ".m.synth-", ""), []string{ownerless, live.Path}
	slices.Sort(left)
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("left after the write: -want %v +got %v (the write's own directory is gone)", want, left)
	}
}

// The refusal for want of space names the temporary directories of the same name that the sweep kept,
// which hold some of the space.
func TestSpaceCheckNamesLeftovers(t *testing.T) {
	parent := t.TempDir()
	free, ok := diskspace.Free(parent)
	if !ok {
		t.Skip("free space unknown on this system")
	}
	ownerless := mkLeftover(t, parent, ".m.synth-333", false)
	p, _ := LookupPreset("small")
	err := checkSpace(filepath.Join(parent, "m"), free*2+1, p)
	if !errors.Is(err, ErrSpace) || !strings.Contains(err.Error(), ownerless) {
		t.Fatalf("-want ErrSpace naming %s +got %v", ownerless, err)
	}
}
