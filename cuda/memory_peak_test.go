package cuda

import "testing"

// MemoryPeak's pool mark rises by at least a tensor allocated and freed since the reset, holds after the
// free, and starts again from what is held at the next reset; Allocated counts what is outside the pool.
func TestMemoryPeak(t *testing.T) {
	b := testBackend(t, Options{})
	if !b.async {
		t.Skip("no stream-ordered pool on this device: every allocation is outside it")
	}
	if err := b.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := b.ResetMemoryPeak(); err != nil {
		t.Fatal(err)
	}
	before, err := b.MemoryPeak()
	if err != nil {
		t.Fatal(err)
	}
	const rows, cols = 4096, 8192 // 128 MiB of float32
	x, err := b.Zeros(rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	b.Free(x)
	if err := b.Synchronize(); err != nil {
		t.Fatal(err)
	}
	after, err := b.MemoryPeak()
	if err != nil {
		t.Fatal(err)
	}
	const n = 4 * rows * cols
	if after.PoolUsed < before.PoolUsed+n || after.PoolReserved < after.PoolUsed || after.Outside <= 0 ||
		after.Allocated() != after.PoolUsed+after.Outside {
		t.Errorf("after a %d-byte tensor: %+v (before %+v): want the pool's used mark up by it, reserved at least used, something outside the pool", n, after, before)
	}
	if err := b.ResetMemoryPeak(); err != nil {
		t.Fatal(err)
	}
	reset, err := b.MemoryPeak()
	if err != nil {
		t.Fatal(err)
	}
	if reset.PoolUsed >= after.PoolUsed {
		t.Errorf("after the reset: pool used %d, want below the %d before it (the tensor is freed)", reset.PoolUsed, after.PoolUsed)
	}
	t.Logf("before %+v, after a %d-byte tensor %+v, reset %+v", before, n, after, reset)
}
