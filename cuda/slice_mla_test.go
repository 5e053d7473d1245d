package cuda_test

import (
	"testing"

	"github.com/potato-k3/potato-k3/cuda"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/ops/opstest"
)

// TestSlicesPrefixInParts runs the shared slice checks with the carried MLA prefix expanded 64 rows at a
// time (Options.MLAPrefixRows), so that slices continuing the checks' 130-row sequence past row 64 and
// 128 attend to it in two and three launches, each continuing the last one's softmax state: the unsliced
// op's bits, on the tensor-core kernel (BF16) and on the CUDA cores (FP32, and BF16 with NoTensorCores).
func TestSlicesPrefixInParts(t *testing.T) {
	if err := cuda.Available(); err != nil {
		t.Skipf("CUDA backend not available on this machine: %v", err)
	}
	for _, tc := range []struct {
		name string
		off  bool
	}{{"tensor cores", false}, {"CUDA cores", true}} {
		t.Run(tc.name, func(t *testing.T) {
			opstest.RunSlices(t, func(p ops.Precision) ops.Backend {
				return newBackendWith(t, cuda.Options{Precision: p, Sync: true, MLAPrefixRows: 64, NoTensorCores: tc.off})
			})
		})
	}
}

// TestMLAPrefixRowsChecked: a part size that would split a key block is refused when the backend opens.
func TestMLAPrefixRowsChecked(t *testing.T) {
	if err := cuda.Available(); err != nil {
		t.Skipf("CUDA backend not available on this machine: %v", err)
	}
	for _, n := range []int{-64, 1, 100} {
		if b, err := cuda.New(cuda.Options{MLAPrefixRows: n}); err == nil {
			b.Close()
			t.Errorf("MLAPrefixRows %d: opened, want an error", n)
		}
	}
}
