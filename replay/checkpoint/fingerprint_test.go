package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestFingerprint: the fingerprint is the same for the same checkpoint (reopened, or copied to another
// directory) and differs when a sampled byte of the tensor data or any header field differs: a small
// shard is sampled whole, a large one at its first byte, its last and six ranges between. A byte that no
// sample reads leaves it unchanged, as its doc says.
func TestFingerprint(t *testing.T) {
	const big = "model-00002-of-00002.safetensors"
	write := func(t *testing.T, edit func(shards map[string][]tt)) string {
		t.Helper()
		shards := smallModel()
		// a shard whose data (1 MiB) is far larger than the samples
		shards[big] = append(shards[big], tt{name: "language_model.model.layers.1.large.weight", dtype: U8, shape: []int64{1024, 1024}})
		if edit != nil {
			edit(shards)
		}
		dir := t.TempDir()
		writeCheckpoint(t, dir, shards)
		return dir
	}
	fingerprint := func(t *testing.T, dir string) string {
		t.Helper()
		d, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		f, err := d.Fingerprint(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	base := write(t, nil)
	want := fingerprint(t, base)
	if got := fingerprint(t, base); got != want {
		t.Fatalf("the same directory opened twice: %s, then %s", want, got)
	}
	if got := fingerprint(t, write(t, nil)); got != want {
		t.Fatalf("a copy in another directory: %s, want %s", got, want)
	}
	// a copy with one byte of the large shard flipped, at off (given its data section's start and the
	// file's size)
	flip := func(t *testing.T, off func(dataStart, size int64) int64) string {
		t.Helper()
		dir := write(t, nil)
		d, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		var start, size int64
		for _, h := range d.Headers() {
			if h.File == big {
				start, size = h.DataStart, h.Size
			}
		}
		d.Close()
		path := filepath.Join(dir, big)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[off(start, size)] ^= 0xff
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, c := range []struct {
		name string
		dir  func(t *testing.T) string
		same bool
	}{
		{"the first byte of a small tensor's data", func(t *testing.T) string {
			return write(t, func(s map[string][]tt) {
				x := &s["model-00001-of-00002.safetensors"][2]
				x.data = x.bytes()
				x.data[0] ^= 1
			})
		}, false},
		{"a tensor renamed", func(t *testing.T) string {
			return write(t, func(s map[string][]tt) { s["model-00001-of-00002.safetensors"][2].name += "_" })
		}, false},
		{"a dtype", func(t *testing.T) string {
			return write(t, func(s map[string][]tt) { s["model-00001-of-00002.safetensors"][1].dtype = "I32" })
		}, false},
		{"the large shard's first data byte", func(t *testing.T) string {
			return flip(t, func(start, _ int64) int64 { return start })
		}, false},
		{"the large shard's last byte", func(t *testing.T) string {
			return flip(t, func(_, size int64) int64 { return size - 1 })
		}, false},
		{"a byte between the large shard's samples", func(t *testing.T) string {
			return flip(t, func(start, size int64) int64 { return start + (size-start)/14 + fingerprintBytes })
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := fingerprint(t, c.dir(t)); (got == want) != c.same {
				t.Errorf("fingerprint %s, the original's %s: want same %v", got, want, c.same)
			}
		})
	}
	d, err := Open(base)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Fingerprint(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: %v", err)
	}
}
