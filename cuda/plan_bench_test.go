package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkExpertsPlan times the host side of one ExpertsAccumulate call before its closure runs
// (AssignRows on an indexed routing and planGroupedTiles), one call of 128 of 896 experts (the bench's
// --expert-chunk 128, seven such calls a layer): at a 65,536-token wave's routing, and at a pooled
// 262,144-token wave's (about 600,000 pairs a call), whose first call the device waits for. No GPU needed.
// On the 2-core development machine the pooled call took 25 ms planned serially, 14 ms in parts
// (docs/records/run55).
func BenchmarkExpertsPlan(b *testing.B) {
	const k, experts, call = 16, 896, 128
	for _, rows := range []int{65536, 262144} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			rt := randRouting(rng, rows, k, experts, 0).Indexed()
			rt.BuildIndex()
			es := make([]*Expert, call)
			ids := make([]int, call)
			for i := range es {
				es[i], ids[i] = &Expert{id: 256 + i}, 256+i
			}
			b.ResetTimer()
			for range b.N {
				work, err := rt.AssignRows(ids, rows)
				if err != nil {
					b.Fatal(err)
				}
				_ = planGroupedTiles(es, work, rows, xTileRows)
			}
		})
	}
}
