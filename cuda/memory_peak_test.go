package cuda

import (
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// MemoryPeak's pool mark rises by at least a tensor allocated and freed since the reset, holds after the
// free, and starts again from what is held at the next reset; Allocated counts what is outside the pool.
func TestMemoryPeak(t *testing.T) {
	b := peakBackend(t, "every allocation is outside it")
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

// With ops timed (ProfileOps), each op reports the most the pool had allocated during it and what it
// added: a Zeros of a 128 MiB tensor adds at least the tensor, and holds the 64 MiB tensor made before
// it besides; MemoryPeak still reports the most over the ops, whose calls restart the pool's mark.
func TestOpMemory(t *testing.T) {
	b := peakBackend(t, "the ops' memory is not measured")
	const rows, cols = 4096, 8192 // 128 MiB of float32
	spans := profiled(t, b, func() {
		small, err := b.Zeros(rows/2, cols)
		if err != nil {
			t.Fatal(err)
		}
		big, err := b.Zeros(rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		b.Free(big)
		b.Free(small)
	})
	var zeros *ops.OpTime
	for i := range spans {
		for j := range spans[i].Ops {
			if spans[i].Ops[j].Op == "Zeros" {
				zeros = &spans[i].Ops[j]
			}
		}
	}
	const n = 4 * rows * cols
	switch {
	case zeros == nil:
		t.Fatalf("no Zeros in the profile: %+v", spans)
	case zeros.Calls != 2 || zeros.MemOwn < n || zeros.MemHigh < n+n/2:
		t.Errorf("Zeros: %+v: want 2 calls, one adding at least %d bytes beside the %d made before it", *zeros, n, n/2)
	}
	peak, err := b.MemoryPeak()
	if err != nil {
		t.Fatal(err)
	}
	if peak.PoolUsed < zeros.MemHigh {
		t.Errorf("MemoryPeak %+v: below the op profile's %d", peak, zeros.MemHigh)
	}
	t.Logf("Zeros %+v; MemoryPeak %+v", *zeros, peak)
}

// profiled runs fn with every op timed (ProfileOps) and returns the op profile.
func profiled(t *testing.T, b *Backend, fn func()) []ops.OpSpan {
	t.Helper()
	if err := b.ProfileOps(true); err != nil {
		t.Fatal(err)
	}
	fn()
	if err := b.ProfileOps(false); err != nil {
		t.Fatal(err)
	}
	spans, err := b.OpProfile()
	if err != nil {
		t.Fatal(err)
	}
	return spans
}

// peakBackend is a test backend with a stream-ordered pool, its work so far finished and MemoryPeak's
// marks restarted; without a pool the test is skipped (why: what that leaves unmeasured).
func peakBackend(t *testing.T, why string) *Backend {
	t.Helper()
	b := testBackend(t, Options{})
	if !b.async {
		t.Skip("no stream-ordered pool on this device: " + why)
	}
	if err := b.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := b.ResetMemoryPeak(); err != nil {
		t.Fatal(err)
	}
	return b
}
