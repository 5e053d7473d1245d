package cuda

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkExpertsPlan times the host side of one ExpertsAccumulate call before its closure runs
// (AssignRows and planGrouped) at a 65,536-token wave's routing, one call of 128 of 896 experts (the
// bench's --expert-chunk 128, seven such calls a layer). No GPU needed. On the 2-core development machine
// about 8 ms a call, 1.3e8 entries/s: 56 ms of host time a layer, hidden behind the layer's 0.39 s of
// device time at that wave size.
func BenchmarkExpertsPlan(b *testing.B) {
	const rows, k, experts, call = 65536, 16, 896, 128
	rng := rand.New(rand.NewPCG(1, 2))
	rt := randRouting(rng, rows, k, experts, 0)
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
		_ = planGrouped(es, work, rows)
	}
	// routing entries scanned a second: AssignRows reads every (row, choice) of the wave in every call
	b.ReportMetric(float64(rows*k)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}
