//go:build linux

package checkpoint

import (
	"os"
	"syscall"
	"testing"
)

// TestDirectRefusedAtOpen simulates a file system that refuses O_DIRECT: reads must fall back to buffered
// I/O for that shard, once, and still be correct.
func TestDirectRefusedAtOpen(t *testing.T) {
	dir := t.TempDir()
	tensors := writeReadModel(t, dir)
	d, err := Open(dir, WithSegmentSize(segTestSize), WithDirectIO(true))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.openDirect = func(p string) (*os.File, error) {
		return nil, &os.PathError{Op: "open", Path: p, Err: syscall.EINVAL}
	}
	checkReads(t, d, tensors)
	if st := d.Stats(); st.Fallbacks != 1 || st.Direct != 0 {
		t.Errorf("Stats = %+v, want 1 fallback and no direct reads", st)
	}
}

// TestDirectOnTmpfs reads from /dev/shm, a tmpfs: older kernels refuse O_DIRECT there, newer ones accept
// it. Either way the bytes must be right.
func TestDirectOnTmpfs(t *testing.T) {
	if st, err := os.Stat("/dev/shm"); err != nil || !st.IsDir() {
		t.Skip("no /dev/shm")
	}
	dir, err := os.MkdirTemp("/dev/shm", "checkpoint-test-")
	if err != nil {
		t.Skip(err)
	}
	defer os.RemoveAll(dir)
	tensors := writeReadModel(t, dir)
	d, err := Open(dir, WithSegmentSize(segTestSize), WithDirectIO(true))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	checkReads(t, d, tensors)
	t.Logf("tmpfs: %+v", d.Stats())
}
