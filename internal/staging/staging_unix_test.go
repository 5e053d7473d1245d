//go:build unix

package staging

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestMain doubles as a writer that holds a staging directory until it is killed (STAGING_CHILD: the
// parent directory; it prints the path it made).
func TestMain(m *testing.M) {
	if parent := os.Getenv("STAGING_CHILD"); parent != "" {
		d, err := Mkdir(parent, ".w.", ".tmp")
		if err != nil {
			os.Exit(1)
		}
		os.Stdout.WriteString(d.Path + "\n")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A sweep removes what killed writers left and keeps a live writer's, one without an owner file and other
// names; a published directory holds no owner file once disowned; Release removes an unpublished one.
func TestSweep(t *testing.T) {
	parent := t.TempDir()
	mk := func(name string, owner bool) string {
		p := filepath.Join(parent, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if owner {
			if err := os.WriteFile(filepath.Join(p, OwnerFile), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	killed := mk(".w.111.tmp", true) // its writer died: the owner file is there, its lock free
	ownerless := mk(".w.222.tmp", false)
	other := mk(".w.x.333.tmp", true) // another name's staging
	live, err := Mkdir(parent, ".w.", ".tmp")
	if err != nil {
		t.Fatal(err)
	}
	// a writer in another process, killed: its directory must go
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "STAGING_CHILD="+parent)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, _ := out.Read(buf)
	child := string(buf[:max(0, n-1)])
	Sweep(parent, ".w.", ".tmp")
	if _, err := os.Stat(child); err != nil {
		t.Errorf("a live writer's directory in another process was swept: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()

	Sweep(parent, ".w.", ".tmp")
	for _, c := range []struct {
		path string
		kept bool
	}{{killed, false}, {child, false}, {ownerless, true}, {other, true}, {live.Path, true}} {
		if _, err := os.Stat(c.path); (err == nil) != c.kept {
			t.Errorf("%s: kept %v, want %v", filepath.Base(c.path), err == nil, c.kept)
		}
	}
	if left := Left(parent, ".w.", ".tmp"); !slices.Contains(left, live.Path) || !slices.Contains(left, ownerless) || len(left) != 2 {
		t.Errorf("Left: %v", left)
	}

	if err := live.Disown(); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(parent, "published")
	if err := live.Rename(dst); err != nil {
		t.Fatal(err)
	}
	live.Release()
	if entries, err := os.ReadDir(dst); err != nil || len(entries) != 0 {
		t.Errorf("published directory: %v, %v (want it there, empty)", entries, err)
	}

	gone, err := Mkdir(parent, ".w.", ".tmp")
	if err != nil {
		t.Fatal(err)
	}
	gone.Release()
	gone.Release()
	if _, err := os.Stat(gone.Path); err == nil {
		t.Error("Release kept an unpublished directory")
	}
}
