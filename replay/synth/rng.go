package synth

import (
	"hash/fnv"
	"math"
	"math/bits"
)

// Random streams. Every tensor row has its own stream, keyed by (seed, tensor name, row): a tensor's bytes
// then do not depend on the order in which tensors or rows are generated, so the writer can fill rows on
// any number of goroutines and a preset is reproducible from its seed alone. Quantities shared between
// tensors (a token's routing code, its successors) get streams of their own names, so every tensor that
// needs them recomputes the same values.

// key derives the 64-bit key of a named stream from the seed: FNV-1a of the name, then mixed with the
// seed through splitmix64 so that nearby seeds give unrelated keys.
func key(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return mix64(h.Sum64() ^ mix64(seed+0x9e3779b97f4a7c15))
}

// mix64 is splitmix64's finaliser: a bijection on uint64 with good avalanche.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// rng is wyrand: one add and one 64x64->128 multiply per draw, fast enough that generating a K3 MoE layer
// (16.6 GB) keeps up with a disk, and statistically sound for weights.
type rng struct{ s uint64 }

// stream returns the generator of row r of the stream with key k.
func stream(k uint64, r int) rng { return rng{s: mix64(k ^ uint64(r)*0xd1b54a32d192ed03)} }

func (g *rng) next() uint64 {
	g.s += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(g.s, g.s^0xe7037ed1a0b428db)
	return hi ^ lo
}

// uniform returns a float64 in [0, 1).
func (g *rng) uniform() float64 { return float64(g.next()>>11) * (1.0 / (1 << 53)) }

// intn returns an int in [0, n), n > 0 (the modulo bias is below 2^-40 for the sizes used here).
func (g *rng) intn(n int) int { return int(g.next() % uint64(n)) }

// irwinScale turns the sum of four 16-bit uniforms into unit variance: the sum has mean 4*(2^16-1)/2 and
// variance 4*(2^32-1)/12.
var irwinScale = 1 / math.Sqrt(4*(math.Exp2(32)-1)/12)

// normal returns an approximately standard normal float32: the Irwin-Hall sum of the four 16-bit parts of
// one draw, centred and scaled. Its tails stop at ±3.46, which suits weights (no outlier that a real
// training run would have clipped or that would make one tensor dominate a product) and costs one draw.
func (g *rng) normal() float32 {
	x := g.next()
	s := x&0xffff + x>>16&0xffff + x>>32&0xffff + x>>48
	return float32((float64(s) - 2*65535) * irwinScale)
}

// gaussian returns an exactly Gaussian float64 (Box-Muller), for the few quantities where the tails matter
// more than speed (per-token and per-channel parameters).
func (g *rng) gaussian() float64 {
	u := 1 - g.uniform() // (0, 1]
	return math.Sqrt(-2*math.Log(u)) * math.Cos(2*math.Pi*g.uniform())
}

// perm returns a permutation of 0..n-1 (Fisher-Yates).
func (g *rng) perm(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	for i := n - 1; i > 0; i-- {
		j := g.intn(i + 1)
		p[i], p[j] = p[j], p[i]
	}
	return p
}
