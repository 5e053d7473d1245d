package device

import (
	"math/rand/v2"
	"testing"
)

// TestRingAlloc (no GPU): a model of the upload ring where copies complete only when waited for (a device
// far behind the host) or, at random, on their own in queue order. No region is ever placed over a copy
// still in flight, whatever the sizes and laps; retiring up to the last overlap keeps the queue order.
func TestRingAlloc(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 9))
		const size = 1 << 16
		a := ringAlloc{size: size}
		inFlight := map[uintptr][2]int{} // event -> region
		done := 0                        // copies completed so far, in queue order (events are 1, 2, ...)
		var next uintptr
		for range 5000 {
			n := (1 + rng.IntN(size/2/ringAlign)) * ringAlign
			if rng.IntN(4) == 0 { // the device catches up a little
				for k := 0; k < rng.IntN(3) && k < len(a.pending); k++ {
					done++
				}
			}
			// what UploadAsync does: retire the completed front, place, wait for the last overlap
			k := 0
			for k < len(a.pending) && int(a.pending[k].ev) <= done {
				k++
			}
			for _, ev := range a.retire(k) {
				delete(inFlight, ev)
			}
			at, last := a.place(n)
			if at < 0 || at+n > size {
				t.Fatalf("seed %d: region [%d, %d) outside the ring of %d", seed, at, at+n, size)
			}
			if last >= 0 {
				done = max(done, int(a.pending[last].ev)) // waiting for it completes every copy before it
				for _, ev := range a.retire(last + 1) {
					delete(inFlight, ev)
				}
			}
			for ev, r := range inFlight {
				if int(ev) <= done {
					continue // completed, only not yet retired
				}
				if r[0] < at+n && r[1] > at {
					t.Fatalf("seed %d: region [%d, %d) placed over [%d, %d), whose copy %d is in flight (done %d)", seed, at, at+n, r[0], r[1], ev, done)
				}
			}
			next++
			a.commit(at, n, next)
			inFlight[next] = [2]int{at, at + n}
		}
	}
}
