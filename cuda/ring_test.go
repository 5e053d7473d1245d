package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/cuda/device"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestUploadRing: uploads through the ring (device.UploadAsync) land intact when they go around it several
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
	sizes := []int{device.RingSize/2 + 1000} // the staging path
	total := 0
	for total < 4*device.RingSize {
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
			if dev[i], err = b.dv.Malloc(n); err != nil {
				return err
			}
			return b.dv.UploadAsync(b.dv.Stream, dev[i], data[i])
		}); err != nil {
			t.Fatalf("upload %d (%d bytes): %v", i, n, err)
		}
		for j := range data[i] { // the ring holds its own copy: the caller's slice may change at once
			data[i][j] ^= 0xff
		}
	}
	for i, n := range sizes {
		got := make([]byte, n)
		if err := b.ex.Do(func() error { return b.dv.ToHost(got, dev[i]) }); err != nil {
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
		if err := b.ex.Do(func() error { return b.dv.Free(dev[i]) }); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d uploads, %s through the ring (%d bytes) and one of %d bytes through staging: intact",
		len(sizes)-1, fmt.Sprintf("%.0f MB", float64(total)/1e6), device.RingSize, sizes[0])
}
