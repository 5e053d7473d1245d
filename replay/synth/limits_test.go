package synth

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/internal/diskspace"
)

// A dense write too large for the disk is refused from the plan's arithmetic, before the layout (every
// tensor listed, in memory) is built, and a layer count past a model's or a tensor count past MaxTensors
// before the plan is.
func TestWriteRefusesBeforeLayout(t *testing.T) {
	tests := []struct {
		name  string
		o     Options
		space bool   // needs more space than the disk has (skipped where it has that much)
		want  string // in the error
	}{
		{"200 K3 layers, dense", Options{Preset: "k3-layer", Layers: 200}, true, "needs"},
		{"1e8 layers", Options{Preset: "tiny", Layers: 1e8}, false, "100000000 layers: more than the 1024"},
		{"1000 K3 layers, sparse", Options{Preset: "k3-layer", Layers: 1000, Sparse: true}, false, "more than the 1988880 synth writes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "m")
			if tc.space {
				// 200 of K3's layers are about 3.4 TB
				if free, ok := diskspace.Free(filepath.Dir(dir)); !ok || free > 3e12 {
					t.Skip("free space unknown, or enough for 200 of K3's layers")
				}
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Write(context.Background(), dir, tc.o)
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("-want …%s… +got %v", tc.want, err)
			}
			if tc.space && !errors.Is(err, ErrSpace) {
				t.Errorf("want ErrSpace, got %v", err)
			}
			if a := after.TotalAlloc - before.TotalAlloc; a > 32<<20 {
				t.Errorf("refused after allocating %d MB: the layout was built", a>>20)
			}
		})
	}
}
