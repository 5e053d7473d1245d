package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestUploadRing: uploads through the ring (uploadAsync) land intact when they go around it several
// times while the stream is busy with matmuls queued before and between them (so that regions are wanted
// again while their copies are still in flight), and one larger than half the ring takes the staging
// path.
func TestUploadRing(t *testing.T) {
	b := testBackend(t, Options{Precision: ops.BF16})
	rng := rand.New(rand.NewPCG(5, 6))
	x, err := b.FromHost(4096, 7168, make([]float32, 4096*7168))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(x)
	w := bf16Weight(t, b, rng, 12288, 7168, 0.01)
	defer b.Free(w)

	// The device starts far behind: about 0.15 s of matmuls queued before the first upload, so that the
	// ring goes round more than twice while copies of earlier laps are still pending.
	for range 100 {
		y, err := b.MatMul(x, w)
		if err != nil {
			t.Fatal(err)
		}
		b.Free(y)
	}
	sizes := []int{ringSize/2 + 1000} // the staging path
	total := 0
	for total < 4*ringSize {
		n := 1 + rng.IntN(3<<20)
		sizes = append(sizes, n)
		total += n
	}
	data := make([][]byte, len(sizes))
	dev := make([]uint64, len(sizes))
	for i, n := range sizes {
		data[i] = make([]byte, n)
		for j := range data[i] {
			data[i][j] = byte(rng.Uint32())
		}
		if i%20 == 0 { // keep the stream busy: the copies queue behind the matmul
			y, err := b.MatMul(x, w)
			if err != nil {
				t.Fatal(err)
			}
			b.Free(y)
		}
		if err := b.ex.Do(func() error {
			var err error
			if dev[i], err = b.malloc(n); err != nil {
				return err
			}
			return (&opCtx{b: b, op: "TestUploadRing"}).uploadAsync(dev[i], data[i])
		}); err != nil {
			t.Fatalf("upload %d (%d bytes): %v", i, n, err)
		}
		for j := range data[i] { // the ring holds its own copy: the caller's slice may change at once
			data[i][j] ^= 0xff
		}
	}
	for i, n := range sizes {
		got := make([]byte, n)
		if err := b.ex.Do(func() error { return b.toHost(got, dev[i]) }); err != nil {
			t.Fatal(err)
		}
		bad := 0
		for j := range got {
			if got[j] != data[i][j]^0xff {
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("upload %d (%d bytes): %d bytes differ", i, n, bad)
		}
		if err := b.ex.Do(func() error { return b.free(dev[i]) }); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d uploads, %s through the ring (%d bytes) and one of %d bytes through staging: intact",
		len(sizes)-1, fmt.Sprintf("%.0f MB", float64(total)/1e6), ringSize, sizes[0])
}

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
			// what uploadAsync does: retire the completed front, place, wait for the last overlap
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
