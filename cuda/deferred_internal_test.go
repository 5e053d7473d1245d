package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestDeferredRounding: every op that reads a MatMul's output gives, with the MatMul's rounding deferred
// to it (deferred.go), the bits it gives with Options.EagerRounding: the ops whose kernels round as they
// load (Add, MulSigmoid, the gate of GatedRMSNorm, ShortConvSiLU, KDA's graw and braw, MLA's q, kv and
// ks, the experts' z), the copies that carry the mark (Slice, JoinRows, Gather) and the readers that
// round first (ToHost, RMSNorm's x). Each case checks that some input of the op was deferred, so the
// comparison means something, and the first deferred output is checked to hold values that are not
// bfloat16 values yet.
func TestDeferredRounding(t *testing.T) {
	b := newLtBackend(t, false)
	rng := rand.New(rand.NewPCG(13, 14))
	const rows, hidden, heads, d = 333, 256, 2, 128
	l := ops.Layout{Starts: []int{0, 100, 101, 333}}
	act := func(r, c int, scale float64) ops.Tensor { // bfloat16 values (fastFill rounds)
		x, err := b.FromHost(r, c, fastFill(rng, r*c, scale))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Free(x) })
		return x
	}
	x := act(rows, hidden, 1)
	weights := map[int]ops.Tensor{} // by output width, made on first use
	var deferred int                // MatMul and SiTUFFN outputs left unrounded in the current run
	var checked bool
	// note counts y if its rounding was deferred, and checks the first such tensor's raw values
	note := func(y ops.Tensor) ops.Tensor {
		t.Helper()
		t.Cleanup(func() { b.Free(y) })
		yt := y.(*Tensor)
		if !yt.unrounded {
			return y
		}
		deferred++
		if checked {
			return y
		}
		checked = true // the raw sums: most are not bfloat16 values
		v := make([]float32, yt.n())
		if err := b.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if err := download(b, v, yt.ptr); err != nil {
			t.Fatal(err)
		}
		off := 0
		for _, f := range v {
			if math.Float32bits(f)&0xffff != 0 {
				off++
			}
		}
		if off < len(v)/2 {
			t.Errorf("a deferred output: %d of %d values are not bfloat16 values, want most", off, len(v))
		}
		return y
	}
	mm := func(m int) ops.Tensor { // x times a weight of m rows
		t.Helper()
		w, ok := weights[m]
		if !ok {
			w = bf16Weight(t, b, rng, m, hidden, 1/math.Sqrt(hidden))
			weights[m] = w
			t.Cleanup(func() { b.Free(w) })
		}
		y, err := b.MatMul(x, w)
		if err != nil {
			t.Fatal(err)
		}
		return note(y)
	}
	ffn := newFFNWeights(t, b, rng, 384, hidden)
	experts := newExpertsCase(t, b, rng, hidden, 192, rows, []int{3, 4, 9}, []int{200, 1, 150})
	defer experts.free(b)
	cases := []struct {
		name string
		op   func() (ops.Tensor, error)
	}{
		{"ToHost", func() (ops.Tensor, error) { return mm(384), nil }},
		{"Add", func() (ops.Tensor, error) { return b.Add(mm(384), mm(128)) }},
		{"Add, one operand rounded", func() (ops.Tensor, error) { return b.Add(act(rows, 384, 1), mm(384)) }},
		{"MulSigmoid", func() (ops.Tensor, error) { return b.MulSigmoid(mm(384), mm(128)) }},
		{"GatedRMSNorm", func() (ops.Tensor, error) { return b.GatedRMSNorm(mm(256), act(1, 128, 1), mm(384), 1e-5) }},
		{"ShortConvSiLU", func() (ops.Tensor, error) { return b.ShortConvSiLU(mm(384), act(384, 4, 0.5), l) }},
		{"Slice, RMSNorm", func() (ops.Tensor, error) {
			s, err := b.Slice(mm(384), 128, 256)
			if err != nil {
				return nil, err
			}
			defer b.Free(s)
			return b.RMSNorm(s, act(1, 128, 1), 1e-5)
		}},
		{"JoinRows", func() (ops.Tensor, error) { return b.JoinRows([]ops.Tensor{mm(128), act(rows, 128, 1), mm(128)}) }},
		{"Gather", func() (ops.Tensor, error) { return b.Gather(mm(384), []int32{5, 0, 332, 5}) }},
		{"KDA", func() (ops.Tensor, error) {
			ch := heads * d
			return b.KDA(act(rows, ch, 1), act(rows, ch, 1), act(rows, ch, 1), mm(ch), mm(heads), act(1, heads, 0.5), act(1, ch, 0.5), heads, -5, l)
		}},
		{"MLA", func() (ops.Tensor, error) {
			return b.MLA(mm(heads*(128+64)), mm(heads*(128+128)), mm(64), heads, 128, 64, 128, l)
		}},
		{"SiTUFFN, Add", func() (ops.Tensor, error) {
			y, err := b.SiTUFFN(x, ffn.gate, ffn.up, ffn.down, 4, 25)
			if err != nil {
				return nil, err
			}
			return b.Add(note(y), act(rows, hidden, 1))
		}},
		{"ExpertsAccumulate", func() (ops.Tensor, error) {
			acc := act(rows, hidden, 0.1)
			return acc, b.ExpertsAccumulate(acc, mm(hidden), experts.rt, experts.es, 4, 25)
		}},
	}
	for _, c := range cases {
		run := func(eager bool) ([]float32, int) {
			t.Helper()
			b.opts.EagerRounding, deferred = eager, 0
			y, err := c.op()
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			v, err := b.ToHost(y)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			return v, y.Cols()
		}
		want, cols := run(true)
		if deferred != 0 {
			t.Errorf("%s: with EagerRounding, %d MatMul outputs were left unrounded", c.name, deferred)
			continue
		}
		got, _ := run(false)
		if deferred == 0 {
			t.Errorf("%s: no input of the op was deferred, so the case tests nothing (no pinned cuBLASLt algorithm for its shapes?)", c.name)
			continue
		}
		sameBits(t, c.name, got, want, cols)
	}
	b.opts.EagerRounding = false
}
