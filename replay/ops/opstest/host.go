package opstest

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"unsafe"

	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// hostTests cover uploads from the backend's own host memory (ops.HostMemory) and the contract that an
// upload keeps no reference to its bytes.
var hostTests = []test{
	{"HostMemory", testHostMemory},
	{"StableHostMemory", testStableHostMemory},
	{"UploadExperts", testUploadExperts},
	{"BF16Transfer", testBF16Transfer},
	{"QueuedBF16Transfer", testQueuedBF16Transfer},
	{"PrefetchBF16Transfer", testPrefetchBF16Transfer},
}

// hostBufs hands out buffers from the backend's ops.HostMemory, or ordinary memory for a backend without.
type hostBufs struct {
	s   *suite
	mem ops.HostMemory
}

func (h hostBufs) alloc(n int) []byte {
	h.s.Helper()
	if h.mem == nil {
		return make([]byte, n)
	}
	b, err := h.mem.AllocHost(n)
	h.s.must(err, fmt.Sprintf("AllocHost(%d)", n))
	if len(b) < n {
		h.s.Fatalf("AllocHost(%d) returned %d bytes", n, len(b))
	}
	return b
}

func (h hostBufs) free(b []byte) {
	h.s.Helper()
	if h.mem != nil {
		h.s.must(h.mem.FreeHost(b), "FreeHost")
	}
}

// bits is a buffer of n bfloat16 values from alloc, given back when the test ends.
func (h hostBufs) bits(n int) []uint16 {
	h.s.Helper()
	raw := h.alloc(2 * n)
	h.s.Cleanup(func() { h.free(raw) })
	return unsafe.Slice((*uint16)(unsafe.Pointer(&raw[0])), n)
}

// transferBackend returns the suite's backend as T with its host memory, or skips the test: without T
// and ops.HostMemory (named in the message), or in FP32 precision (fp32 says why).
func transferBackend[T any](s *suite, name, fp32 string) (T, ops.HostMemory) {
	s.Helper()
	x, ok := s.b.(T)
	mem, pinned := s.b.(ops.HostMemory)
	if !ok || !pinned {
		s.Skip("the backend has no " + name + " with ops.HostMemory")
	}
	if !s.bf {
		s.Skip(fp32)
	}
	return x, mem
}

// scribble overwrites a buffer with 0xff bytes (NaN bfloat16s and float32s, scale bytes 255), as the
// engine's next read would overwrite it.
func scribble(b []byte) {
	for i := range b {
		b[i] = 0xff
	}
}

// testHostMemory: weights and experts uploaded from the backend's host memory (at unaligned offsets
// inside one buffer, as the engine's read arenas place them) equal those uploaded from ordinary memory
// bit for bit, although the buffer is overwritten as soon as each upload returns; bad expert bytes there
// are refused as anywhere; FreeHost refuses what AllocHost did not hand out.
func testHostMemory(s *suite) {
	mem, _ := s.b.(ops.HostMemory)
	h := hostBufs{s: s, mem: mem}
	shapes := [][2]int{{1, 1}, {65, 129}}
	if mem != nil {
		shapes = append(shapes, [2]int{4100, 8200}) // 67 MB: more than one piece of a 64 MiB staging buffer
	}
	for _, sh := range shapes {
		rows, cols := sh[0], sh[1]
		v := make([]float32, rows*cols)
		for i := range v {
			v[i] = float32(s.rng.NormFloat64())
		}
		rawB := make([]byte, 2*len(v))
		bf16.Encode(rawB, v)
		rawF := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(rawF[4*i:], math.Float32bits(x))
		}
		for _, c := range []struct {
			dt  ops.DType
			raw []byte
		}{{ops.WeightBF16, rawB}, {ops.WeightF32, rawF}} {
			what := fmt.Sprintf("Upload %dx%d dtype %d from host memory", rows, cols, c.dt)
			buf := h.alloc(len(c.raw) + 3)
			src := buf[3 : 3+len(c.raw)]
			copy(src, c.raw)
			wh, err := s.b.Upload(c.dt, rows, cols, src)
			s.must(err, what)
			scribble(buf)
			wg, err := s.b.Upload(c.dt, rows, cols, c.raw)
			s.must(err, what+": from ordinary memory")
			s.same(what, s.host(wh, rows, cols), s.host(wg, rows, cols), cols)
			s.free(wh, wg)
			h.free(buf)
		}
	}

	const latent, ffn, n, beta, linBeta = 64, 96, 33, 4, 25
	e := s.randExpert(0, latent, ffn)
	parts := [][]byte{e.w1.packed, e.w1.scales, e.w3.packed, e.w3.scales, e.w2.packed, e.w2.scales}
	total := 0
	for _, p := range parts {
		total += len(p) + 5
	}
	buf := h.alloc(total + 5)
	place := func() [][]byte { // the parts at odd offsets inside buf, 5 bytes apart
		out := make([][]byte, len(parts))
		off := 5
		for i, p := range parts {
			out[i] = buf[off : off+len(p) : off+len(p)]
			copy(out[i], p)
			off += len(p) + 5
		}
		return out
	}
	in := place()
	xh, err := s.b.UploadExpert(e.id, latent, ffn, in[0], in[1], in[2], in[3], in[4], in[5])
	s.must(err, "UploadExpert from host memory")
	scribble(buf)
	xg := s.upload(e)
	z, _ := s.randAct(n, latent, 1)
	rt := s.randRouting(n, 1, 1) // every row chooses expert 0
	var got [2][]float32
	for i, x := range []ops.Expert{xh, xg} {
		acc, err := s.b.Zeros(n, latent)
		s.must(err, "Zeros")
		s.must(s.b.ExpertsAccumulate(acc, z, rt, []ops.Expert{x}, beta, linBeta), "ExpertsAccumulate")
		got[i] = s.host(acc, n, latent)
		s.free(acc)
	}
	s.same("expert uploaded from host memory vs ordinary memory", got[0], got[1], latent)
	s.free(z)
	s.b.Free(xh)
	s.b.Free(xg)

	in = place()
	in[5][len(in[5])-1] = 255 // the last w2 scale byte: NaN
	s.fails("UploadExpert from host memory with a w2 scale byte 255", func() error {
		x, err := s.b.UploadExpert(e.id, latent, ffn, in[0], in[1], in[2], in[3], in[4], in[5])
		s.b.Free(x)
		return err
	})
	h.free(buf)
	if mem != nil {
		s.fails("FreeHost of ordinary memory", func() error { return mem.FreeHost(make([]byte, 8)) })
		b := h.alloc(64)
		h.free(b)
		s.fails("FreeHost twice", func() error { return mem.FreeHost(b) })
	}
}

// testStableHostMemory (backends with ops.StableHostMemory): experts uploaded from buffers marked stable,
// several queued before any is used and one freed before it is ever used, give the same bits in
// ExpertsAccumulate as experts from ordinary memory; a scale byte 255 in a stable buffer is refused;
// MarkStable refuses a part of a buffer and ordinary memory.
func testStableHostMemory(s *suite) {
	mem, ok := s.b.(ops.StableHostMemory)
	if !ok {
		return
	}
	h := hostBufs{s: s, mem: mem}
	const latent, ffn, n, beta, linBeta = 64, 96, 47, 4, 25
	type placed struct {
		buf   []byte
		parts [][]byte
	}
	// place copies an expert's six parts into a new buffer at odd offsets, lets edit change them, and
	// marks the buffer stable.
	place := func(e expert, edit func([][]byte)) placed {
		parts := [][]byte{e.w1.packed, e.w1.scales, e.w3.packed, e.w3.scales, e.w2.packed, e.w2.scales}
		total := 7
		for _, p := range parts {
			total += len(p) + 7
		}
		pl := placed{buf: h.alloc(total)}
		off := 7
		for _, p := range parts {
			dst := pl.buf[off : off+len(p) : off+len(p)]
			copy(dst, p)
			pl.parts = append(pl.parts, dst)
			off += len(p) + 7
		}
		if edit != nil {
			edit(pl.parts)
		}
		s.must(mem.MarkStable(pl.buf), "MarkStable")
		return pl
	}
	es := []expert{s.randExpert(0, latent, ffn), s.randExpert(1, latent, ffn), s.randExpert(2, latent, ffn)}
	var bufs []placed
	var fromStable, fromGo []ops.Expert
	for _, e := range es { // every upload queued before any expert is used
		pl := place(e, nil)
		bufs = append(bufs, pl)
		p := pl.parts
		x, err := s.b.UploadExpert(e.id, latent, ffn, p[0], p[1], p[2], p[3], p[4], p[5])
		s.must(err, fmt.Sprintf("UploadExpert %d from stable memory", e.id))
		fromStable = append(fromStable, x)
	}
	s.b.Free(fromStable[1]) // freed before it is ever used: its copy may still be in flight
	for _, i := range []int{0, 2} {
		fromGo = append(fromGo, s.upload(es[i]))
	}
	z, _ := s.randAct(n, latent, 1)
	rt := s.randRouting(n, 2, 3) // two of experts 0, 1, 2 a row; 1 is not in the call
	var got [2][]float32
	for i, xs := range [][]ops.Expert{{fromStable[0], fromStable[2]}, fromGo} {
		acc, err := s.b.Zeros(n, latent)
		s.must(err, "Zeros")
		s.must(s.b.ExpertsAccumulate(acc, z, rt, xs, beta, linBeta), "ExpertsAccumulate")
		got[i] = s.host(acc, n, latent)
		s.free(acc)
	}
	s.same("experts uploaded from stable host memory vs ordinary memory", got[0], got[1], latent)
	s.free(z)
	for _, x := range append([]ops.Expert{fromStable[0], fromStable[2]}, fromGo...) {
		s.b.Free(x)
	}
	bad := place(es[0], func(p [][]byte) { p[3][0] = 255 }) // w3's first scale byte: NaN
	s.fails("UploadExpert from stable memory with a w3 scale byte 255", func() error {
		p := bad.parts
		x, err := s.b.UploadExpert(es[0].id, latent, ffn, p[0], p[1], p[2], p[3], p[4], p[5])
		s.b.Free(x)
		return err
	})
	for _, pl := range append(bufs, bad) {
		h.free(pl.buf)
	}
	part := h.alloc(64)
	s.fails("MarkStable of part of a buffer", func() error { return mem.MarkStable(part[8:]) })
	s.fails("MarkStable of ordinary memory", func() error { return mem.MarkStable(make([]byte, 64)) })
	h.free(part)
}

// testUploadExperts (backends with ops.ExpertBatchUploader): a batch from ordinary memory, and one from
// stable host memory when the backend has it, gives experts whose ExpertsAccumulate equals that of
// experts uploaded one by one, bit for bit; a batch with a scale byte 255 in its third expert fails
// naming that expert.
func testUploadExperts(s *suite) {
	up, ok := s.b.(ops.ExpertBatchUploader)
	if !ok {
		return
	}
	const latent, ffn, n, beta, linBeta = 64, 96, 41, 4, 25
	es := []expert{s.randExpert(2, latent, ffn), s.randExpert(5, latent, ffn), s.randExpert(6, latent, ffn), s.randExpert(9, latent, ffn)}
	parts := func(e expert) ops.ExpertParts {
		return ops.ExpertParts{ID: e.id, W1Packed: e.w1.packed, W1Scale: e.w1.scales, W3Packed: e.w3.packed,
			W3Scale: e.w3.scales, W2Packed: e.w2.packed, W2Scale: e.w2.scales}
	}
	var one []ops.Expert
	for _, e := range es {
		one = append(one, s.upload(e))
	}
	z, _ := s.randAct(n, latent, 1)
	rt := s.randRouting(n, 3, 10)
	run := func(xs []ops.Expert) []float32 {
		acc, err := s.b.Zeros(n, latent)
		s.must(err, "Zeros")
		s.must(s.b.ExpertsAccumulate(acc, z, rt, xs, beta, linBeta), "ExpertsAccumulate")
		out := s.host(acc, n, latent)
		s.free(acc)
		return out
	}
	want := run(one)
	batches := map[string][]ops.ExpertParts{}
	for _, e := range es {
		batches["ordinary memory"] = append(batches["ordinary memory"], parts(e))
	}
	var bufs [][]byte
	if mem, ok := s.b.(ops.StableHostMemory); ok {
		h := hostBufs{s: s, mem: mem}
		for _, e := range es { // each expert in a stable buffer of its own, at odd offsets
			p := parts(e)
			src := [][]byte{p.W1Packed, p.W1Scale, p.W3Packed, p.W3Scale, p.W2Packed, p.W2Scale}
			total := 3
			for _, b := range src {
				total += len(b) + 3
			}
			buf := h.alloc(total)
			var dst [6][]byte
			off := 3
			for i, b := range src {
				dst[i] = buf[off : off+len(b) : off+len(b)]
				copy(dst[i], b)
				off += len(b) + 3
			}
			s.must(mem.MarkStable(buf), "MarkStable")
			bufs = append(bufs, buf)
			batches["stable memory"] = append(batches["stable memory"], ops.ExpertParts{ID: e.id, W1Packed: dst[0],
				W1Scale: dst[1], W3Packed: dst[2], W3Scale: dst[3], W2Packed: dst[4], W2Scale: dst[5]})
		}
		// All experts in one stable buffer, every part 16 bytes after a multiple of 16 (a device backend
		// may copy such a batch as one piece), 48 bytes of another tensor between experts.
		total := 16
		for _, e := range es {
			p := parts(e)
			for _, b := range [][]byte{p.W1Packed, p.W1Scale, p.W3Packed, p.W3Scale, p.W2Packed, p.W2Scale} {
				total += (len(b)+15)&^15 + 16
			}
			total += 48
		}
		buf := h.alloc(total)
		off := 16
		for _, e := range es {
			p := parts(e)
			var dst [6][]byte
			for i, b := range [][]byte{p.W1Packed, p.W1Scale, p.W3Packed, p.W3Scale, p.W2Packed, p.W2Scale} {
				dst[i] = buf[off : off+len(b) : off+len(b)]
				copy(dst[i], b)
				off += (len(b)+15)&^15 + 16
			}
			off += 48
			batches["one stable buffer"] = append(batches["one stable buffer"], ops.ExpertParts{ID: e.id, W1Packed: dst[0],
				W1Scale: dst[1], W3Packed: dst[2], W3Scale: dst[3], W2Packed: dst[4], W2Scale: dst[5]})
		}
		s.must(mem.MarkStable(buf), "MarkStable")
		bufs = append(bufs, buf)
	}
	for what, batch := range batches {
		xs, err := up.UploadExperts(latent, ffn, batch)
		s.must(err, "UploadExperts from "+what)
		if len(xs) != len(es) {
			s.Fatalf("UploadExperts from %s: %d experts for %d", what, len(xs), len(es))
		}
		for i, x := range xs {
			if x.ID() != es[i].id {
				s.Errorf("UploadExperts from %s: expert %d has id %d, want %d", what, i, x.ID(), es[i].id)
			}
		}
		s.same("UploadExperts from "+what+" vs UploadExpert one by one", run(xs), want, latent)
		// Freed one at a time, the rest still used in between: experts sharing device memory keep it.
		s.b.Free(xs[1])
		s.same("UploadExperts from "+what+", experts 0 and 3 after expert 1 was freed",
			run([]ops.Expert{xs[0], xs[3]}), run([]ops.Expert{one[0], one[3]}), latent)
		for _, x := range []ops.Expert{xs[0], xs[2], xs[3]} {
			s.b.Free(x)
		}
	}
	bad := make([]ops.ExpertParts, len(es))
	for i, e := range es {
		bad[i] = parts(e)
	}
	w2s := append([]byte(nil), bad[2].W2Scale...)
	w2s[len(w2s)-1] = 255
	bad[2].W2Scale = w2s
	s.fails("UploadExperts with a w2 scale byte 255 in the third expert", func() error {
		xs, err := up.UploadExperts(latent, ffn, bad)
		for _, x := range xs {
			s.b.Free(x)
		}
		if err != nil && !strings.Contains(err.Error(), "expert 6") {
			s.Errorf("UploadExperts error %q does not name expert 6", err)
		}
		return err
	})
	s.free(z)
	for _, x := range one {
		s.b.Free(x)
	}
	if mem, ok := s.b.(ops.StableHostMemory); ok {
		for _, b := range bufs {
			s.must(mem.FreeHost(b), "FreeHost")
		}
	}
}
