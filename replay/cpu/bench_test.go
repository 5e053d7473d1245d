package cpu_test

import (
	"fmt"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// Benchmarks report work per second with b.ReportMetric; FLOP counts multiply-adds as two.

// BenchmarkMatMul: a lone token against a K3-width weight (memory bound: 4 bytes of weight per 2 FLOP),
// a block of tokens, and a wide block (compute bound).
func BenchmarkMatMul(b *testing.B) {
	for _, s := range []struct{ n, k, m int }{{1, 7168, 1024}, {64, 1024, 1024}, {256, 7168, 256}} {
		b.Run(fmt.Sprintf("n=%d,k=%d,m=%d", s.n, s.k, s.m), func(b *testing.B) {
			be := cpu.New(cpu.Options{Precision: ops.BF16})
			g := newGen(b, be, 1)
			x, w := g.act(s.n, s.k, 1), g.weight(s.m, s.k, 0.01)
			for b.Loop() {
				out, err := be.MatMul(x, w)
				if err != nil {
					b.Fatal(err)
				}
				be.Free(out)
			}
			b.ReportMetric(2*float64(s.n*s.k*s.m)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkKDA: 4 sequences of 256 tokens, 4 heads of 128; about 8 d^2 FLOP per token and head.
func BenchmarkKDA(b *testing.B) {
	const seqs, T, heads, d = 4, 256, 4, 128
	be := cpu.New(cpu.Options{Precision: ops.BF16})
	g := newGen(b, be, 2)
	rows, ch := seqs*T, heads*d
	l := ops.Layout{Starts: []int{0, T, 2 * T, 3 * T, 4 * T}}
	q, k, v, gr := g.act(rows, ch, 1), g.act(rows, ch, 1), g.act(rows, ch, 1), g.act(rows, ch, 1)
	br, aLog, dt := g.act(rows, heads, 1), g.weight(1, heads, 0.5), g.weight(1, ch, 0.5)
	for b.Loop() {
		out, err := be.KDA(q, k, v, gr, br, aLog, dt, heads, -5, l)
		if err != nil {
			b.Fatal(err)
		}
		be.Free(out)
	}
	b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(8*float64(rows*heads*d*d)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkMLA: 4 sequences of 256 tokens, 4 heads with K3's head sizes (128 + 64, v 128).
func BenchmarkMLA(b *testing.B) {
	const seqs, T, heads, nope, shared, vdim = 4, 256, 4, 128, 64, 128
	be := cpu.New(cpu.Options{Precision: ops.BF16})
	g := newGen(b, be, 3)
	rows := seqs * T
	l := ops.Layout{Starts: []int{0, T, 2 * T, 3 * T, 4 * T}}
	q, kv, ks := g.act(rows, heads*(nope+shared), 1), g.act(rows, heads*(nope+vdim), 1), g.act(rows, shared, 1)
	for b.Loop() {
		out, err := be.MLA(q, kv, ks, heads, nope, shared, vdim, l)
		if err != nil {
			b.Fatal(err)
		}
		be.Free(out)
	}
	// causal: T(T+1)/2 (query, key) pairs per sequence and head, each a (nope+shared)- and a vdim-long product
	pairs := float64(seqs*heads) * T * (T + 1) / 2
	b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(2*pairs*(nope+shared+vdim)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkExpertsAccumulate: 128 tokens choosing 4 of 16 experts of latent 512 and width 384; each
// (token, expert) costs three latent x ffn products.
func BenchmarkExpertsAccumulate(b *testing.B) {
	const rows, k, n, latent, ffn = 128, 4, 16, 512, 384
	be := cpu.New(cpu.Options{Precision: ops.BF16})
	g := newGen(b, be, 4)
	var experts []ops.Expert
	for id := range n {
		experts = append(experts, g.expert(id, latent, ffn, g.expertBytes(latent, ffn)))
	}
	z, rt := g.act(rows, latent, 1), g.routing(rows, k, n)
	acc, err := be.Zeros(rows, latent)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := be.ExpertsAccumulate(acc, z, rt, experts, 4, 25); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(6*float64(rows*k*latent*ffn)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkTokenStats: 64 rows against a 32k vocabulary of width 512 (the logits product dominates).
func BenchmarkTokenStats(b *testing.B) {
	const rows, vocab, cols = 64, 32768, 512
	be := cpu.New(cpu.Options{Precision: ops.BF16})
	g := newGen(b, be, 5)
	h, w := g.act(rows, cols, 1), g.weight(vocab, cols, 0.05)
	targets := make([]int32, rows)
	for b.Loop() {
		if _, err := be.TokenStats(h, w, targets, 10); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(2*float64(rows*vocab*cols)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
