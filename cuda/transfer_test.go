package cuda

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/cuda/device"
)

// TestStagedTransfers (GPU): copies through the staging buffer arrive intact at every size around its
// pieces: one byte, a transfer that fits the buffer, exactly one and two buffers, and transfers that
// alternate between its halves for several pieces ending in a partial one; ToHost reads back what
// ToDevice wrote, into a buffer with guard bytes on both sides that stay as they were. The last size
// reports the rates both ways.
func TestStagedTransfers(t *testing.T) {
	b := testBackend(t, Options{})
	rng := rand.New(rand.NewPCG(7, 11))
	const m = device.StagingMax
	for _, n := range []int{1, 4095, m/2 + 3, m, m + 1, 2 * m, 3*m + m/3 + 12345} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(rng.Uint32())
			}
			var p uint64
			var up, down time.Duration
			got := make([]byte, n+2*64)
			for i := range got {
				got[i] = 0xa5
			}
			err := b.ex.Do(func() error {
				var err error
				if p, err = b.dv.Malloc(n); err != nil {
					return err
				}
				if err := b.dv.Sync(); err != nil {
					return err
				}
				start := time.Now()
				if err := b.dv.ToDevice(p, src); err != nil {
					return err
				}
				up = time.Since(start)
				start = time.Now()
				if err := b.dv.ToHost(got[64:64+n], p); err != nil {
					return err
				}
				down = time.Since(start)
				return b.dv.Free(p)
			})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[64:64+n], src) {
				i := 0
				for got[64+i] == src[i] {
					i++
				}
				t.Fatalf("%d bytes: first difference at byte %d: got %#x, want %#x", n, i, got[64+i], src[i])
			}
			for i := range 64 {
				if got[i] != 0xa5 || got[64+n+i] != 0xa5 {
					t.Fatalf("%d bytes: a guard byte changed", n)
				}
			}
			if n > 2*m {
				t.Logf("TIMING staged %d MB: to the device %.2f GB/s, to the host %.2f GB/s", n>>20,
					float64(n)/up.Seconds()/1e9, float64(n)/down.Seconds()/1e9)
			}
		})
	}
}
