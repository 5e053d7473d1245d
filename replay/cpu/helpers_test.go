package cpu_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// gen makes seeded inputs for the CPU-specific tests and benchmarks.
type gen struct {
	tb  testing.TB
	b   *cpu.Backend
	rng *rand.Rand
}

func newGen(tb testing.TB, b *cpu.Backend, seed uint64) *gen {
	return &gen{tb: tb, b: b, rng: rand.New(rand.NewPCG(seed, 7))}
}

func (g *gen) floats(n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(scale * g.rng.NormFloat64())
	}
	return v
}

// act is a random activation (rounded by FromHost in BF16).
func (g *gen) act(rows, cols int, scale float64) ops.Tensor {
	g.tb.Helper()
	x, err := g.b.FromHost(rows, cols, g.floats(rows*cols, scale))
	if err != nil {
		g.tb.Fatal(err)
	}
	return x
}

// weight is a random F32 weight (exact in both precisions).
func (g *gen) weight(rows, cols int, scale float64) ops.Tensor {
	g.tb.Helper()
	return g.f32(rows, cols, g.floats(rows*cols, scale))
}

func (g *gen) f32(rows, cols int, v []float32) ops.Tensor {
	g.tb.Helper()
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	w, err := g.b.Upload(ops.WeightF32, rows, cols, raw)
	if err != nil {
		g.tb.Fatal(err)
	}
	return w
}

// mxfp4 returns random packed bytes and scales (2^-5 .. 2^-3) of a rows x cols matrix.
func (g *gen) mxfp4(rows, cols int) (packed, scales []byte) {
	packed, scales = make([]byte, rows*cols/2), make([]byte, rows*cols/32)
	for i := range packed {
		packed[i] = byte(g.rng.IntN(256))
	}
	for i := range scales {
		scales[i] = byte(122 + g.rng.IntN(3))
	}
	return packed, scales
}

// expertBytes are the six MXFP4 buffers of one expert, in UploadExpert's order.
type expertBytes [6][]byte

func (g *gen) expertBytes(latent, ffn int) expertBytes {
	var e expertBytes
	e[0], e[1] = g.mxfp4(ffn, latent)
	e[2], e[3] = g.mxfp4(ffn, latent)
	e[4], e[5] = g.mxfp4(latent, ffn)
	return e
}

func (g *gen) expert(id, latent, ffn int, e expertBytes) ops.Expert {
	g.tb.Helper()
	x, err := g.b.UploadExpert(id, latent, ffn, e[0], e[1], e[2], e[3], e[4], e[5])
	if err != nil {
		g.tb.Fatal(err)
	}
	return x
}

// routing picks k distinct experts of n per row with weights in (0, 1).
func (g *gen) routing(rows, k, n int) ops.Routing {
	rt := ops.Routing{K: k, IDs: make([]int32, rows*k), Weights: make([]float32, rows*k)}
	for r := range rows {
		for j, e := range g.rng.Perm(n)[:k] {
			rt.IDs[r*k+j], rt.Weights[r*k+j] = int32(e), float32(0.05+0.9*g.rng.Float64())
		}
	}
	return rt
}

func host(tb testing.TB, b ops.Backend, x ops.Tensor, err error) []float32 {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
	v, err := b.ToHost(x)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// sameBits reports the first element where got and want differ in their bits.
func sameBits(tb testing.TB, what string, got, want []float32) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			tb.Errorf("%s: value %d is %.9g (%#08x), want %.9g (%#08x)", what, i, got[i], math.Float32bits(got[i]),
				want[i], math.Float32bits(want[i]))
			return
		}
	}
}

// host reads a result of an op: g.host(b.MatMul(x, w)).
func (g *gen) host(x ops.Tensor, err error) []float32 {
	g.tb.Helper()
	return host(g.tb, g.b, x, err)
}
