//go:build unix

package filelock

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestMain doubles as a process that holds a lock until it is killed (FILELOCK_CHILD: the path).
func TestMain(m *testing.M) {
	if path := os.Getenv("FILELOCK_CHILD"); path != "" {
		if _, err := Acquire(path, 0o600, true); err != nil {
			os.Exit(1)
		}
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// One holder at a time; Held and Abandoned tell a live holder from none; a lock is free again once
// released, and once its process is gone (kill -9), which the test checks with a child that holds one.
func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	if Held(path) || Abandoned(path) {
		t.Fatal("a missing file is held or abandoned")
	}
	l, err := Acquire(path, 0o600, false)
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to the open file: a second open in this process conflicts like another process
	if _, err := Acquire(path, 0o600, false); !errors.Is(err, ErrHeld) {
		t.Errorf("second Acquire: %v, want ErrHeld", err)
	}
	if !Held(path) || Abandoned(path) {
		t.Error("a held lock reads as free")
	}
	l.Unlock()
	l.Unlock() // twice is harmless
	if Held(path) || !Abandoned(path) {
		t.Error("a released lock reads as held")
	}
	l2, err := Acquire(path, 0o600, true)
	if err != nil {
		t.Fatal(err)
	}
	l2.Unlock()

	// a process that dies holding the lock leaves it free: this test binary, as the child (TestMain)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "FILELOCK_CHILD="+path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !Held(path) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !Held(path) {
		t.Fatal("the child's lock never showed")
	}
	cmd.Process.Signal(os.Kill)
	cmd.Wait()
	if !Abandoned(path) {
		t.Error("a killed holder's lock is still held")
	}
}
