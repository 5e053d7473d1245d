package cuda

import (
	"encoding/binary"
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
	acts := map[string]ops.Tensor{}
	act := func(name string, r, c int, scale float64) ops.Tensor { // bfloat16 values (fastFill rounds), made once
		t.Helper()
		if x, ok := acts[name]; ok {
			return x
		}
		x, err := b.FromHost(r, c, fastFill(rng, r*c, scale))
		if err != nil {
			t.Fatal(err)
		}
		acts[name] = x
		t.Cleanup(func() { b.Free(x) })
		return x
	}
	x := act("x", rows, hidden, 1)
	weights := map[string]ops.Tensor{} // made on first use
	var deferred int                   // MatMul and SiTUFFN outputs left unrounded in the current run
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
	mm := func(name string, m int) ops.Tensor { // x times the weight of that name, m rows
		t.Helper()
		w, ok := weights[name]
		if !ok {
			w = bf16Weight(t, b, rng, m, hidden, 1/math.Sqrt(hidden))
			weights[name] = w
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
	accv := fastFill(rng, rows*hidden, 0.1)
	cases := []struct {
		name string
		op   func() (ops.Tensor, error)
	}{
		{"ToHost", func() (ops.Tensor, error) { return mm("w1", 384), nil }},
		{"Add", func() (ops.Tensor, error) { return b.Add(mm("w2", 384), mm("w3", 384)) }},
		{"Add, one operand rounded", func() (ops.Tensor, error) { return b.Add(act("a1", rows, 384, 1), mm("w4", 384)) }},
		{"MulSigmoid", func() (ops.Tensor, error) { return b.MulSigmoid(mm("w5", 384), mm("w6", 384)) }},
		{"GatedRMSNorm", func() (ops.Tensor, error) {
			return b.GatedRMSNorm(mm("w7", 256), act("a2", 1, 128, 1), mm("w8", 256), 1e-5)
		}},
		{"ShortConvSiLU", func() (ops.Tensor, error) { return b.ShortConvSiLU(mm("w9", 384), act("a3", 384, 4, 0.5), l) }},
		{"Slice, RMSNorm", func() (ops.Tensor, error) {
			s, err := b.Slice(mm("w10", 384), 128, 256)
			if err != nil {
				return nil, err
			}
			defer b.Free(s)
			return b.RMSNorm(s, act("a4", 1, 128, 1), 1e-5)
		}},
		{"JoinRows", func() (ops.Tensor, error) {
			return b.JoinRows([]ops.Tensor{mm("w11", 128), act("a5", rows, 128, 1), mm("w12", 128)})
		}},
		{"Gather", func() (ops.Tensor, error) { return b.Gather(mm("w13", 384), []int32{5, 0, 332, 5}) }},
		{"KDA", func() (ops.Tensor, error) {
			ch := heads * d
			return b.KDA(act("a6", rows, ch, 1), act("a7", rows, ch, 1), act("a8", rows, ch, 1), mm("w14", ch), mm("w15", heads), act("a9", 1, heads, 0.5), act("a10", 1, ch, 0.5), heads, -5, l)
		}},
		{"MLA", func() (ops.Tensor, error) {
			return b.MLA(mm("w16", heads*(128+64)), mm("w17", heads*(128+128)), mm("w18", 64), heads, 128, 64, 128, l)
		}},
		{"SiTUFFN, Add", func() (ops.Tensor, error) {
			y, err := b.SiTUFFN(x, ffn.gate, ffn.up, ffn.down, 4, 25)
			if err != nil {
				return nil, err
			}
			return b.Add(note(y), act("a11", rows, hidden, 1))
		}},
		{"ExpertsAccumulate", func() (ops.Tensor, error) {
			acc, err := b.FromHost(rows, hidden, accv) // a fresh sum each run: the op adds into it
			if err != nil {
				return nil, err
			}
			return note(acc), b.ExpertsAccumulate(acc, mm("w19", hidden), experts.rt, experts.es, 4, 25)
		}},
	}
	for _, c := range cases {
		run := func(eager bool) ([]float32, int, error) {
			b.opts.EagerRounding, deferred = eager, 0
			y, err := c.op()
			if err != nil {
				return nil, 0, err
			}
			v, err := b.ToHost(y)
			return v, y.Cols(), err
		}
		want, cols, err := run(true)
		if err != nil {
			t.Errorf("%s, eager: %v", c.name, err)
			continue
		}
		if deferred != 0 {
			t.Errorf("%s: with EagerRounding, %d MatMul outputs were left unrounded", c.name, deferred)
			continue
		}
		got, _, err := run(false)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if deferred == 0 {
			t.Errorf("%s: no input of the op was deferred, so the case tests nothing (no pinned cuBLASLt algorithm for its shapes?)", c.name)
			continue
		}
		sameBits(t, c.name, got, want, cols)
	}
	b.opts.EagerRounding = false
}

// TestRnd4Bits: the kernels' rounding of a deferred input (common.cuh rnd4, the hardware conversion) gives
// bf16_round's bits (k_round, the MatMul's own rounding pass) for every kind of float32 number: each exponent
// with mantissas at, below and above the halfway point of both parities, subnormals, the largest values
// (which round to infinity), infinities and random bits; a NaN stays a NaN (its payload is not part of
// the contract: rnd4 gives the canonical one). The values reach k_add4 as a
// deferred tensor plus -0 (x + -0 is x for every x, zeros included), against Round of the same tensor.
func TestRnd4Bits(t *testing.T) {
	b := newLtBackend(t, false)
	rng := rand.New(rand.NewPCG(15, 16))
	var bits []uint32
	for e := uint32(0); e < 256; e++ {
		for _, m := range []uint32{0, 1, 0x7fff, 0x8000, 0x8001, 0x17fff, 0x18000, 0x18001, 0x7f7fff, 0x7f8000, 0x7fffff} {
			for _, sign := range []uint32{0, 1 << 31} {
				bits = append(bits, sign|e<<23|m)
			}
		}
	}
	for len(bits) < 1<<20 {
		bits = append(bits, rng.Uint32())
	}
	const cols = 256
	for len(bits)%cols != 0 {
		bits = append(bits, 0)
	}
	rows := len(bits) / cols
	raw := make([]byte, 4*len(bits))
	negz := make([]byte, 4*len(bits))
	for i, u := range bits {
		binary.LittleEndian.PutUint32(raw[4*i:], u)
		binary.LittleEndian.PutUint32(negz[4*i:], 1<<31)
	}
	up := func(raw []byte) *Tensor {
		x, err := b.Upload(ops.WeightF32, rows, cols, raw) // float32 storage, the values as given
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Free(x) })
		return x.(*Tensor)
	}
	x, z := up(raw), up(negz)
	x.unrounded = true
	sum, err := b.Add(x, z) // rnd4 on x (k_add4), before anything settles x
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(sum)
	rounded, err := b.Round(x) // settles x in place (k_round4), then k_round: bf16_round
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(rounded)
	got, err := b.ToHost(sum)
	if err != nil {
		t.Fatal(err)
	}
	want, err := b.ToHost(rounded)
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i := range want {
		g, w := math.Float32bits(got[i]), math.Float32bits(want[i])
		if g != w && !(got[i] != got[i] && want[i] != want[i]) {
			if bad++; bad <= 10 {
				t.Errorf("%#08x: rnd4 gives %#08x, bf16_round %#08x", bits[i], g, w)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d values differ", bad, len(want))
	}
	t.Logf("%d values: rnd4 gives bf16_round's bits (NaN as NaN)", len(want))
}
