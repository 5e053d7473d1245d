package cuda

import (
	"fmt"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestMLAPartStateCoversTiles: the state a slice's MLA keeps between key parts (mlaPartFloats) holds
// every 64-row tile of sequence 0 that a launch's kernel indexes, for the mma.sync kernel (tiles of 64)
// and the wgmma kernel (blocks of 128 rows, each warpgroup's 64-row tile indexed from the block at st0),
// and not more than one tile beyond. The kernels index tile (t0 - st0) / 64 with st0 the lowest first row
// of the launched tiles (tilesFrom); the launch tiles come from mlaTCTasks. No device: the backend here
// only answers which kernel runs.
func TestMLAPartStateCoversTiles(t *testing.T) {
	const heads, nope, shared, vdim = 3, 128, 64, 128
	for _, arch := range []string{"sm_90", "sm_90a"} {
		b := &Backend{bf: 1, info: DeviceInfo{Arch: arch}}
		k, ok := b.mlaTCKernel(nope+shared, vdim)
		if !ok {
			t.Fatalf("%s: no tensor-core kernel for %d+%d / %d", arch, nope, shared, vdim)
		}
		per := heads * mlaTCThreads * (k.vp/8*4 + 4)
		for _, c := range []struct{ lens []int }{
			{[]int{1000}}, {[]int{4096, 300}}, {[]int{130, 64}}, {[]int{64}}, {[]int{65, 700, 3}},
		} {
			starts := []int{0}
			for _, n := range c.lens {
				starts = append(starts, starts[len(starts)-1]+n)
			}
			l := ops.Layout{Starts: starts}
			for _, qOff := range []int{0, 1, 63, 64, 65, 127, 128, 129, 200, c.lens[0] - 1} {
				if qOff < 0 || qOff >= c.lens[0] {
					continue
				}
				name := fmt.Sprintf("%s %s lens %v qOff %d", arch, k.name, c.lens, qOff)
				kept, low := tilesFrom(mlaTCTasks(l, k.tileRows()), qOff)
				need := 0
				for i := 0; i < len(kept); i += 3 {
					if kept[i] != 0 {
						continue // only sequence 0's tiles keep state
					}
					for t0w := int(kept[i+1]); t0w < int(kept[i+2]); t0w += mlaTCTile {
						idx := (t0w - low) / mlaTCTile
						if idx < 0 {
							t.Fatalf("%s: tile at row %d indexes state tile %d (st0 %d)", name, t0w, idx, low)
						}
						need = max(need, idx+1)
					}
				}
				have := b.mlaPartFloats(heads, nope, shared, vdim, l, qOff)
				if have < need*per {
					t.Errorf("%s: state of %d floats, the kernel indexes %d tiles of %d", name, have, need, per)
				}
				if have > (need+1)*per {
					t.Errorf("%s: state of %d floats, more than one tile beyond the %d tiles of %d indexed", name, have, need, per)
				}
			}
		}
	}
}
