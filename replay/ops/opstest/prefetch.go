package opstest

import (
	"fmt"
	"math"

	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// testPrefetchBF16Transfer holds ops.PrefetchBF16Transfer to its contract in BF16 precision: from host
// memory from AllocHost (and ordinary memory), Take gives FromHostBF16's bits with ops queued between
// the two halves (they run beside the copy); several transfers in flight at once end in any order; a
// dropped transfer leaves nothing behind and its buffer may be reused; ending a transfer twice fails.
func testPrefetchBF16Transfer(s *suite) {
	pf, mem := transferBackend[ops.PrefetchBF16Transfer](s, "ops.PrefetchBF16Transfer", "split transfers are BF16 precision's")
	const rows, cols, n = 129, 72, 3
	all := hostBufs{s, mem}.bits(n * rows * cols)
	bufs := make([][]uint16, n)
	var wants [][]float32
	for i := range n {
		bufs[i] = all[i*rows*cols : (i+1)*rows*cols]
		x, _ := s.randAct(rows, cols, float64(1+i))
		y, err := s.b.Add(x, x) // an op's output: bfloat16 values
		s.must(err, "Add")
		want := s.host(y, rows, cols)
		wants = append(wants, want)
		copy(bufs[i], s.toBits(want))
		s.free(x, y)
	}
	var started []ops.Prefetched
	for i := range n {
		x, err := pf.PrefetchBF16(rows, cols, bufs[i])
		s.must(err, "PrefetchBF16")
		started = append(started, x)
	}
	// work queued between the halves, as a slice's layer is
	a, _ := s.randAct(rows, cols, 2)
	busy, err := s.b.MatMul(a, a)
	s.must(err, "MatMul between the halves")
	// ended out of order: the last first, the middle one dropped
	last, err := started[2].Take()
	s.must(err, "Take")
	s.same("Take of the last transfer started", s.host(last, rows, cols), wants[2], cols)
	s.must(started[1].Drop(), "Drop")
	first, err := started[0].Take()
	s.must(err, "Take")
	s.same("Take of the first transfer started, after work queued between", s.host(first, rows, cols), wants[0], cols)
	s.fails("a second Take", func() error {
		_, err := started[0].Take()
		return err
	})
	s.fails("Drop after Take", func() error { return started[2].Drop() })
	s.free(a, busy, first, last)
	// the dropped transfer's buffer reused at once
	copy(bufs[1], s.toBits(wants[0]))
	again, err := pf.PrefetchBF16(rows, cols, bufs[1])
	s.must(err, "PrefetchBF16 from a dropped transfer's buffer")
	t, err := again.Take()
	s.must(err, "Take")
	s.same("Take from a dropped transfer's buffer, refilled", s.host(t, rows, cols), wants[0], cols)
	s.free(t)
	// ordinary memory: the tensor may be made at once; Take gives it
	plain := s.toBits(wants[1])
	x, err := pf.PrefetchBF16(rows, cols, plain)
	s.must(err, "PrefetchBF16 from ordinary memory")
	t, err = x.Take()
	s.must(err, "Take")
	s.same("Take of a transfer from ordinary memory", s.host(t, rows, cols), wants[1], cols)
	s.free(t)
	s.fails("PrefetchBF16 with the wrong length", func() error {
		_, err := pf.PrefetchBF16(rows, cols, plain[:7])
		return err
	})
	testDownloadThenPrefetch(s, pf, bufs)
}

// testDownloadThenPrefetch: queued downloads into pinned buffers, their tensors freed at once and the
// memory taken by new work, then the buffers started on their way back before any Sync (the engine's
// next layer, its first slice's state prefetched while the last slice computes): each Take gives the
// downloaded bits. The tensors are an op's output and a matmul's (which a device may keep a narrow copy
// of), and the downloads are queued back to back into two buffers.
func testDownloadThenPrefetch(s *suite, pf ops.PrefetchBF16Transfer, bufs [][]uint16) {
	rows, cols := 129, 72
	a, _ := s.randAct(rows, cols, 3)
	w, _ := s.randWeight(cols, cols, 1/math.Sqrt(float64(cols)))
	sum, err := s.b.Add(a, a)
	s.must(err, "Add")
	prod, err := s.b.MatMul(a, w)
	s.must(err, "MatMul")
	ys := []ops.Tensor{sum, prod}
	var wants [][]float32
	for i, y := range ys {
		wants = append(wants, s.host(y, rows, cols))
		s.must(pf.ToHostBF16Queued(y, bufs[i]), "ToHostBF16Queued")
		s.free(y) // freed while its copy may be on its way
	}
	busy, err := s.b.MatMul(a, w) // new work, likely in the freed memory
	s.must(err, "MatMul after the downloads")
	var started []ops.Prefetched
	for i := range ys {
		x, err := pf.PrefetchBF16(rows, cols, bufs[i])
		s.must(err, "PrefetchBF16 of a buffer a queued download writes")
		started = append(started, x)
	}
	for i, x := range started {
		t, err := x.Take()
		s.must(err, "Take")
		s.same(fmt.Sprintf("Take of a buffer that a queued download of the %s wrote", []string{"Add's output", "MatMul's output"}[i]), s.host(t, rows, cols), wants[i], cols)
		s.free(t)
	}
	s.must(pf.Sync(), "Sync")
	for i := range ys {
		s.same("a queued download's buffer after Sync", widen(bufs[i]), wants[i], cols)
	}
	s.free(a, w, busy)
}

// toBits returns the bfloat16 bits of float32 values that are bfloat16 values (an op's outputs).
func (s *suite) toBits(v []float32) []uint16 {
	out := make([]uint16, len(v))
	if !bf16.Bits(out, v) {
		s.Fatalf("values that are not bfloat16 values in BF16 precision")
	}
	return out
}
