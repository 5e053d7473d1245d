package cpu_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// exercise runs every op on inputs large enough to be split across goroutines in several ways (many
// output blocks, k panels, chunks of TokenStats rows, MLA query blocks, expert batches of both kinds) and
// returns each op's results as float32 values (ids and ranks converted exactly).
func exercise(t *testing.T, b *cpu.Backend) map[string][]float32 {
	g := newGen(t, b, 42)
	out := map[string][]float32{}
	put := func(name string) func(ops.Tensor, error) {
		return func(x ops.Tensor, err error) { out[name] = host(t, b, x, err) }
	}
	x := g.act(130, 1100, 1)
	w := g.weight(200, 1100, 0.03)
	put("MatMul")(b.MatMul(x, w))
	a, c := g.act(130, 2048, 1), g.act(130, 2048, 1)
	nw := g.weight(1, 128, 1)
	put("Add")(b.Add(a, c))
	put("RMSNorm")(b.RMSNorm(a, nw, 1e-5))
	put("GatedRMSNorm")(b.GatedRMSNorm(a, nw, c, 1e-5))
	put("MulSigmoid")(b.MulSigmoid(a, c))
	put("SiTUGLU")(b.SiTUGLU(a, c, 4, 25))
	mix, p, err := b.AttnResMix([]ops.Tensor{g.act(130, 512, 1), g.act(130, 512, 2), g.act(130, 512, 3)}, g.weight(1, 512, 0.1))
	put("AttnResMix")(mix, err)
	out["AttnResMix weights"] = p
	l := ops.Layout{Starts: []int{0, 1, 66, 130}}
	put("ShortConvSiLU")(b.ShortConvSiLU(g.act(130, 512, 1), g.weight(512, 4, 0.5), l))
	kda := func() ops.Tensor { return g.act(130, 128, 1) }
	put("KDA")(b.KDA(kda(), kda(), kda(), kda(), g.act(130, 4, 1), g.weight(1, 4, 0.5), g.weight(1, 128, 0.5), 4, -5, l))
	put("MLA")(b.MLA(g.act(130, 2*24, 1), g.act(130, 2*32, 1), g.act(130, 8, 1), 2, 16, 8, 16, l))
	rt, err := b.Route(g.act(300, 256, 1), g.weight(64, 256, 0.1), g.weight(1, 64, 0.05), 8, 2.5) // two chunks of rows
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range rt.IDs {
		out["Route"] = append(out["Route"], float32(id), rt.Weights[i])
	}
	const latent, ffn = 64, 96
	var experts []ops.Expert
	for id := range 16 {
		experts = append(experts, g.expert(id, latent, ffn, g.expertBytes(latent, ffn)))
	}
	z := g.act(130, latent, 1)
	acc, err := b.Zeros(130, latent)
	if err == nil {
		err = b.ExpertsAccumulate(acc, z, g.routing(130, 4, 16), experts, 4, 25) // many tasks: one goroutine each
	}
	put("ExpertsAccumulate many")(acc, err)
	acc1, err := b.Zeros(130, latent)
	if err == nil {
		err = b.ExpertsAccumulate(acc1, z, g.routing(130, 1, 16), experts[:1], 4, 25) // few tasks: parallel products
	}
	put("ExpertsAccumulate few")(acc1, err)
	targets := make([]int32, 70)
	for i := range targets {
		targets[i] = int32(g.rng.IntN(3000))
	}
	st, err := b.TokenStats(g.act(70, 64, 1), g.weight(3000, 64, 0.3), targets, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		out["TokenStats"] = append(out["TokenStats"], s.Logprob, float32(s.Rank), s.Entropy)
		for j, id := range s.TopIDs {
			out["TokenStats"] = append(out["TokenStats"], float32(id), s.TopLogp[j])
		}
	}
	return out
}

// TestThreadInvariance: 1, 3 and 4 goroutines give the same bits for every op, in both precisions.
func TestThreadInvariance(t *testing.T) {
	for _, p := range []ops.Precision{ops.BF16, ops.FP32} {
		t.Run(p.String(), func(t *testing.T) {
			want := exercise(t, cpu.New(cpu.Options{Precision: p, Threads: 1}))
			for _, n := range []int{3, 4} {
				got := exercise(t, cpu.New(cpu.Options{Precision: p, Threads: n}))
				for name, w := range want {
					sameBits(t, fmt.Sprintf("%s with %d threads vs 1", name, n), got[name], w)
				}
			}
			for name, w := range want {
				nonzero := false
				for _, v := range w {
					nonzero = nonzero || (v != 0 && !math.IsNaN(float64(v)))
				}
				if !nonzero {
					t.Errorf("%s: all zero or NaN", name)
				}
			}
		})
	}
}
