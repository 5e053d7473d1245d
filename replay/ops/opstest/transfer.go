package opstest

import (
	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// testBF16Transfer holds ops.BF16Transfer to its contract: in BF16 precision, ToHostBF16 writes the upper
// halves of ToHost's values (an activation made by FromHost, one computed by an op, and a tail shape that
// is no multiple of 4), FromHostBF16 equals FromHost of the widened bits (signed zeros, subnormals,
// infinities included) and the two round-trip; wrong lengths fail; FP32 precision is refused.
func testBF16Transfer(s *suite) {
	m, ok := s.b.(ops.BF16Transfer)
	if !ok {
		s.Skip("the backend has no ops.BF16Transfer")
	}
	if !s.bf {
		x := s.act(1, 2, []float32{1, 2})
		s.fails("ToHostBF16 in FP32 precision", func() error { return m.ToHostBF16(x, make([]uint16, 2)) })
		s.fails("FromHostBF16 in FP32 precision", func() error {
			_, err := m.FromHostBF16(1, 2, []uint16{0x3f80, 0x4000})
			return err
		})
		s.free(x)
		return
	}
	for _, sh := range []struct{ rows, cols int }{{1, 1}, {3, 5}, {65, 7}, {129, 64}} {
		x, _ := s.randAct(sh.rows, sh.cols, 3)
		y, err := s.b.Add(x, x) // an op's output, not only an upload
		s.must(err, "Add")
		for _, t := range []ops.Tensor{x, y} {
			want := s.host(t, sh.rows, sh.cols)
			got := make([]uint16, sh.rows*sh.cols)
			s.must(m.ToHostBF16(t, got), "ToHostBF16")
			s.same("ToHostBF16 widened against ToHost", widen(got), want, sh.cols)
			back, err := m.FromHostBF16(sh.rows, sh.cols, got)
			s.must(err, "FromHostBF16")
			s.same("FromHostBF16 of ToHostBF16 against ToHost", s.host(back, sh.rows, sh.cols), want, sh.cols)
			s.free(back)
		}
		s.free(x, y)
	}
	// FromHostBF16 against FromHost on bits that are not a random draw's: signed zeros, the smallest
	// subnormal, the largest finite value, infinities.
	bits := []uint16{0x0000, 0x8000, 0x0001, 0x8001, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x3f80, 0xc0a0, 0x3c00}
	want, err := s.b.FromHost(1, len(bits), widen(bits))
	s.must(err, "FromHost")
	got, err := m.FromHostBF16(1, len(bits), bits)
	s.must(err, "FromHostBF16")
	s.same("FromHostBF16 against FromHost", s.host(got, 1, len(bits)), s.host(want, 1, len(bits)), len(bits))
	s.free(want, got)
	x := s.act(2, 3, make([]float32, 6))
	s.fails("ToHostBF16 into a buffer of the wrong length", func() error { return m.ToHostBF16(x, make([]uint16, 5)) })
	s.fails("FromHostBF16 with the wrong length", func() error {
		_, err := m.FromHostBF16(2, 3, make([]uint16, 7))
		return err
	})
	s.free(x)
}

// testQueuedBF16Transfer holds ops.QueuedBF16Transfer to its contract in BF16 precision: into and out of
// host memory from AllocHost (and ordinary memory) the queued transfers give BF16Transfer's bits once Sync
// returns, and they keep the order of the queue with no wait between them: a slice's state downloaded
// into a pinned buffer and uploaded from it again at once, the buffer then reused for the next tensor's
// download, round-trips every value; the freed sources are no hazard (the backend orders their frees).
func testQueuedBF16Transfer(s *suite) {
	q, mem := transferBackend[ops.QueuedBF16Transfer](s, "ops.QueuedBF16Transfer", "queued transfers are BF16 precision's")
	const rows, cols = 129, 72
	buf := hostBufs{s, mem}.bits(rows * cols)
	var wants [][]float32
	var backs []ops.Tensor
	for i := range 3 {
		x, _ := s.randAct(rows, cols, float64(1+i))
		y, err := s.b.Add(x, x) // an op's output, narrowed on the device
		s.must(err, "Add")
		wants = append(wants, s.host(y, rows, cols))
		s.must(q.ToHostBF16Queued(y, buf), "ToHostBF16Queued")
		s.free(x, y) // freed while its copy may still be queued
		back, err := q.FromHostBF16Queued(rows, cols, buf)
		s.must(err, "FromHostBF16Queued")
		backs = append(backs, back)
	}
	s.must(q.Sync(), "Sync")
	for i, back := range backs {
		s.same("FromHostBF16Queued of ToHostBF16Queued through one pinned buffer, queued back to back", s.host(back, rows, cols), wants[i], cols)
	}
	s.same("ToHostBF16Queued's last copy after Sync", widen(buf), wants[2], cols)
	s.free(backs[0], backs[1], backs[2])
	// ordinary memory: the queued forms wait, as BF16Transfer's do
	x, _ := s.randAct(3, 5, 1)
	plain := make([]uint16, 15)
	s.must(q.ToHostBF16Queued(x, plain), "ToHostBF16Queued into ordinary memory")
	s.same("ToHostBF16Queued into ordinary memory, no Sync", widen(plain), s.host(x, 3, 5), 5)
	back, err := q.FromHostBF16Queued(3, 5, plain)
	s.must(err, "FromHostBF16Queued from ordinary memory")
	s.same("FromHostBF16Queued from ordinary memory", s.host(back, 3, 5), s.host(x, 3, 5), 5)
	s.free(x, back)
}

// widen returns the float32 values of bfloat16 bits.
func widen(bits []uint16) []float32 {
	out := make([]float32, len(bits))
	bf16.Widen(out, bits)
	return out
}
