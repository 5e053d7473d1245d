//go:build unix

package synth

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
)

// TestSparse writes k3-layer (2 layers, 6.6 GB of data) sparsely: the reader accepts it and the files
// take almost no disk blocks.
func TestSparse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "k3")
	l, err := Write(context.Background(), dir, Options{Preset: "k3-layer", Layers: 2, Sparse: true})
	if err != nil {
		t.Fatal(err)
	}
	var apparent, allocated int64
	for _, sh := range l.Shards {
		st, err := os.Stat(filepath.Join(dir, sh.File))
		if err != nil {
			t.Fatal(err)
		}
		apparent += st.Size()
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			allocated += sys.Blocks * 512
		}
	}
	if apparent != l.FileBytes() {
		t.Fatalf("files are %d bytes, want %d", apparent, l.FileBytes())
	}
	if allocated > apparent/1000 {
		t.Errorf("sparse files of %d bytes take %d bytes of disk", apparent, allocated)
	}
	d, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Check(l.Plan.Tensors(), model.IgnoredPrefixes...); err != nil {
		t.Fatal(err)
	}
}
