package cuda_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/cuda"
	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// The CUDA backend against the CPU backend on the same inputs. Where the kernels replay the CPU
// backend's statements (doc.go, Numerics) the outputs must be equal bit for bit; elsewhere the test
// reports the largest difference and checks it against a bound of rounding size.

// pair is one input set uploaded to both backends.
type pair struct {
	t   *testing.T
	g   ops.Backend
	c   ops.Backend
	rng *rand.Rand
	bf  bool
}

func newPair(t *testing.T, o cuda.Options) *pair {
	return &pair{t: t, g: newBackendWith(t, o), c: cpu.New(cpu.Options{Precision: o.Precision}),
		rng: rand.New(rand.NewPCG(7, uint64(o.Precision))), bf: o.Precision == ops.BF16}
}

// both holds one tensor per backend.
type both struct{ g, c ops.Tensor }

func (p *pair) act(rows, cols int, scale float64) both {
	p.t.Helper()
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = float32(scale * p.rng.NormFloat64())
	}
	g, err := p.g.FromHost(rows, cols, v)
	if err != nil {
		p.t.Fatal(err)
	}
	c, err := p.c.FromHost(rows, cols, v)
	if err != nil {
		p.t.Fatal(err)
	}
	return both{g, c}
}

func (p *pair) weight(dt ops.DType, rows, cols int, scale float64) both {
	p.t.Helper()
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = float32(scale * p.rng.NormFloat64())
	}
	var raw []byte
	if dt == ops.WeightBF16 {
		raw = make([]byte, 2*len(v))
		bf16.Encode(raw, v)
	} else {
		raw = make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
		}
	}
	g, err := p.g.Upload(dt, rows, cols, raw)
	if err != nil {
		p.t.Fatal(err)
	}
	c, err := p.c.Upload(dt, rows, cols, raw)
	if err != nil {
		p.t.Fatal(err)
	}
	return both{g, c}
}

func (p *pair) host(x both, gerr, cerr error) ([]float32, []float32) {
	p.t.Helper()
	if gerr != nil || cerr != nil {
		p.t.Fatalf("cuda: %v; cpu: %v", gerr, cerr)
	}
	g, err := p.g.ToHost(x.g)
	if err != nil {
		p.t.Fatal(err)
	}
	c, err := p.c.ToHost(x.c)
	if err != nil {
		p.t.Fatal(err)
	}
	return g, c
}

// diff counts the values whose bits differ and the largest |g - c| / (|c| + floor).
func diff(g, c []float32, floor float64) (n int, maxRel float64) {
	for i := range c {
		if math.Float32bits(g[i]) != math.Float32bits(c[i]) {
			n++
			maxRel = max(maxRel, math.Abs(float64(g[i])-float64(c[i]))/(math.Abs(float64(c[i]))+floor))
		}
	}
	return n, maxRel
}

// exact requires equal bits; nearly allows a few values (libm double-precision differences) to differ.
func (p *pair) exact(what string, g, c []float32) {
	p.t.Helper()
	if len(g) != len(c) {
		p.t.Fatalf("%s: %d values from cuda, %d from cpu", what, len(g), len(c))
	}
	if n, rel := diff(g, c, 1e-30); n > 0 {
		p.t.Errorf("%s: %d of %d values differ from the CPU backend's bits (max rel %.3g); want equal bits", what, n, len(c), rel)
	} else {
		p.t.Logf("%s: all %d values equal the CPU backend's bits", what, len(c))
	}
}

func (p *pair) near(what string, g, c []float32, maxFrac, maxRel float64) {
	p.t.Helper()
	var ss float64
	for _, x := range c {
		ss += float64(x) * float64(x)
	}
	n, rel := diff(g, c, math.Sqrt(ss/float64(max(len(c), 1)))) // relative to |value| + the RMS of the output
	p.t.Logf("%s: %d of %d values differ from the CPU backend's bits, max rel diff %.3g", what, n, len(c), rel)
	if float64(n) > maxFrac*float64(len(c)) || rel > maxRel {
		p.t.Errorf("%s: %d of %d values differ (at most %.0f%% may), max rel diff %.3g (at most %.3g)", what, n, len(c), 100*maxFrac, rel, maxRel)
	}
}

// TestAgainstCPU compares every op with the CPU backend in both precisions, with every matmul on the
// CUDA cores (kernel version 1, which replays the CPU backend's loop).
func TestAgainstCPU(t *testing.T) {
	for _, prec := range []ops.Precision{ops.BF16, ops.FP32} {
		t.Run(prec.String(), func(t *testing.T) {
			p := newPair(t, cuda.Options{Precision: prec, Sync: true, NoTensorCores: true})
			g, c := p.g, p.c
			// near-equality bounds for the ops with another summation order: one bf16 ulp in BF16 (on a
			// value's rounding boundary), float32 rounding in FP32
			relBound, frac := 1e-5, 1.0 // FP32: another order may move every value by an ulp
			if p.bf {
				relBound, frac = 1.0/64, 0.05 // BF16: a value moves only when it sits on a rounding boundary
			}

			for _, dt := range []ops.DType{ops.WeightBF16, ops.WeightF32} {
				x, w := p.act(130, 1100, 1), p.weight(dt, 67, 1100, 0.03)
				gy, ge := g.MatMul(x.g, w.g)
				cy, ce := c.MatMul(x.c, w.c)
				gv, cv := p.host(both{gy, cy}, ge, ce)
				p.exact(fmt.Sprintf("MatMul 130x1100 by 67x1100 (weight dtype %d)", dt), gv, cv)
			}

			a, b2 := p.act(65, 70, 3), p.act(65, 70, 3)
			for _, op := range []struct {
				name string
				fg   func() (ops.Tensor, error)
				fc   func() (ops.Tensor, error)
			}{
				{"Add", func() (ops.Tensor, error) { return g.Add(a.g, b2.g) }, func() (ops.Tensor, error) { return c.Add(a.c, b2.c) }},
				{"MulSigmoid", func() (ops.Tensor, error) { return g.MulSigmoid(a.g, b2.g) }, func() (ops.Tensor, error) { return c.MulSigmoid(a.c, b2.c) }},
				{"SiTUGLU", func() (ops.Tensor, error) { return g.SiTUGLU(a.g, b2.g, 4, 25) }, func() (ops.Tensor, error) { return c.SiTUGLU(a.c, b2.c, 4, 25) }},
				{"Slice", func() (ops.Tensor, error) { return g.Slice(a.g, 5, 61) }, func() (ops.Tensor, error) { return c.Slice(a.c, 5, 61) }},
			} {
				gy, ge := op.fg()
				cy, ce := op.fc()
				gv, cv := p.host(both{gy, cy}, ge, ce)
				p.exact(op.name, gv, cv)
			}

			x := p.act(300, 96, 2)
			for _, wd := range []ops.DType{ops.WeightBF16, ops.WeightF32} {
				w := p.weight(wd, 1, 96, 1)
				gy, ge := g.RMSNorm(x.g, w.g, 1e-5)
				cy, ce := c.RMSNorm(x.c, w.c, 1e-5)
				gv, cv := p.host(both{gy, cy}, ge, ce)
				p.near(fmt.Sprintf("RMSNorm (weight dtype %d)", wd), gv, cv, frac, relBound)
			}

			vs := []both{p.act(200, 128, 1), p.act(200, 128, 2), p.act(200, 128, 0.5)}
			wg := p.weight(ops.WeightF32, 1, 128, 0.3)
			gy, gp, ge := g.AttnResMix([]ops.Tensor{vs[0].g, vs[1].g, vs[2].g}, wg.g)
			cy, cp, ce := c.AttnResMix([]ops.Tensor{vs[0].c, vs[1].c, vs[2].c}, wg.c)
			gv, cv := p.host(both{gy, cy}, ge, ce)
			p.near("AttnResMix", gv, cv, frac, relBound)
			p.near("AttnResMix weights", gp, cp, 1, 1e-5)

			l := ops.Layout{Starts: []int{0, 70, 73, 203}}
			taps := p.weight(ops.WeightF32, 256, 4, 0.5)
			xs := p.act(203, 256, 1)
			gy, ge = g.ShortConvSiLU(xs.g, taps.g, l)
			cy, ce = c.ShortConvSiLU(xs.c, taps.c, l)
			gv, cv = p.host(both{gy, cy}, ge, ce)
			p.exact("ShortConvSiLU", gv, cv)

			q, k, v, gr := p.act(203, 256, 1), p.act(203, 256, 1), p.act(203, 256, 1), p.act(203, 256, 1)
			br := p.act(203, 2, 1.5)
			aLog, dtb := p.weight(ops.WeightF32, 1, 5, 0.5), p.weight(ops.WeightF32, 1, 256, 0.5)
			gy, ge = g.KDA(q.g, k.g, v.g, gr.g, br.g, aLog.g, dtb.g, 2, -5, l)
			cy, ce = c.KDA(q.c, k.c, v.c, gr.c, br.c, aLog.c, dtb.c, 2, -5, l)
			gv, cv = p.host(both{gy, cy}, ge, ce)
			p.near("KDA 2 heads of 128", gv, cv, 0.001, relBound) // equal bits but for rare libm differences

			mq, mkv, mks := p.act(203, 2*192, 1), p.act(203, 2*256, 1), p.act(203, 64, 1)
			gy, ge = g.MLA(mq.g, mkv.g, mks.g, 2, 128, 64, 128, l)
			cy, ce = c.MLA(mq.c, mkv.c, mks.c, 2, 128, 64, 128, l)
			gv, cv = p.host(both{gy, cy}, ge, ce)
			p.near("MLA 2 heads (128+64, v 128)", gv, cv, frac, 4*relBound)

			rx, rw, rb := p.act(300, 64, 1), p.weight(ops.WeightBF16, 48, 64, 0.125), p.weight(ops.WeightF32, 1, 48, 0.05)
			grt, ge := g.Route(rx.g, rw.g, rb.g, 6, 2.5)
			crt, ce := c.Route(rx.c, rw.c, rb.c, 6, 2.5)
			if ge != nil || ce != nil {
				t.Fatalf("Route: cuda %v, cpu %v", ge, ce)
			}
			ids := 0
			for i := range crt.IDs {
				if grt.IDs[i] != crt.IDs[i] {
					ids++
				}
			}
			if ids > 0 {
				t.Errorf("Route: %d of %d ids differ from the CPU backend's", ids, len(crt.IDs))
			}
			p.exact("Route weights", grt.Weights, crt.Weights)

			p.experts(prec, true)
			p.tokenStats(true)
		})
	}
}

// TestTensorCoresAgainstCPU: in BF16 precision the tensor-core matmul (version 2) sums k in chunks of 16,
// so its outputs differ from the CPU backend's where a float32 difference crosses a bfloat16 rounding
// boundary: rarely, by one bfloat16 ulp.
func TestTensorCoresAgainstCPU(t *testing.T) {
	p := newPair(t, cuda.Options{Precision: ops.BF16, Sync: true})
	for _, shape := range [][3]int{{130, 1100, 67}, {1, 7168, 300}, {200, 64, 129}} {
		n, k, m := shape[0], shape[1], shape[2]
		x, w := p.act(n, k, 1), p.weight(ops.WeightBF16, m, k, 1/math.Sqrt(float64(k)))
		gy, ge := p.g.MatMul(x.g, w.g)
		cy, ce := p.c.MatMul(x.c, w.c)
		gv, cv := p.host(both{gy, cy}, ge, ce)
		p.near(fmt.Sprintf("tensor-core MatMul %dx%d by %dx%d", n, k, m, k), gv, cv, 0.02, 1.0/64)
	}
	p.experts(ops.BF16, false)
	p.tokenStats(false)
}

// experts compares ExpertsAccumulate on random MXFP4 experts: bit for bit when exact, else to a bf16 ulp
// on a few values.
func (p *pair) experts(prec ops.Precision, exact bool) {
	const latent, ffn, n, k = 64, 96, 150, 3
	var ge, ce []ops.Expert
	for id := range 6 {
		var packed, scales [3][]byte
		for i := range 3 {
			rows, cols := ffn, latent
			if i == 2 {
				rows, cols = latent, ffn
			}
			packed[i] = make([]byte, rows*cols/2)
			scales[i] = make([]byte, rows*cols/32)
			for j := range packed[i] {
				packed[i][j] = byte(p.rng.IntN(256))
			}
			for j := range scales[i] {
				scales[i][j] = byte(121 + p.rng.IntN(3))
			}
		}
		g, err := p.g.UploadExpert(id, latent, ffn, packed[0], scales[0], packed[1], scales[1], packed[2], scales[2])
		if err != nil {
			p.t.Fatal(err)
		}
		c, err := p.c.UploadExpert(id, latent, ffn, packed[0], scales[0], packed[1], scales[1], packed[2], scales[2])
		if err != nil {
			p.t.Fatal(err)
		}
		ge, ce = append(ge, g), append(ce, c)
	}
	rt := ops.Routing{K: k, IDs: make([]int32, n*k), Weights: make([]float32, n*k)}
	for r := range n {
		for j, e := range p.rng.Perm(7)[:k] { // expert 6 is chosen but not given
			rt.IDs[r*k+j], rt.Weights[r*k+j] = int32(e), float32(0.05+0.9*p.rng.Float64())
		}
	}
	z, acc := p.act(n, latent, 1), p.act(n, latent, 0.1)
	if err := p.g.ExpertsAccumulate(acc.g, z.g, rt, []ops.Expert{ge[3], ge[0], ge[5], ge[1], ge[2], ge[4]}, 4, 25); err != nil {
		p.t.Fatal(err)
	}
	if err := p.c.ExpertsAccumulate(acc.c, z.c, rt, ce, 4, 25); err != nil {
		p.t.Fatal(err)
	}
	gv, cv := p.host(acc, nil, nil)
	if exact {
		p.exact(fmt.Sprintf("ExpertsAccumulate (%v)", prec), gv, cv)
	} else {
		p.near(fmt.Sprintf("ExpertsAccumulate (%v, tensor cores)", prec), gv, cv, 0.05, 1.0/32)
	}
}

// tokenStats compares TokenStats: when exact (the same logits), ranks and top ids exactly and logprobs
// and entropies to float32 rounding; else (tensor cores: a logit may sit one bfloat16 ulp away) the
// statistics to a few hundredths of a nat and the ranks to within a few places.
func (p *pair) tokenStats(exact bool) {
	const rows, cols, vocab, k = 70, 64, 5000, 8
	h, w := p.act(rows, cols, 1), p.weight(ops.WeightBF16, vocab, cols, 0.5)
	targets := make([]int32, rows)
	for i := range targets {
		targets[i] = int32(p.rng.IntN(vocab))
	}
	targets[5] = -1
	gs, ge := p.g.TokenStats(h.g, w.g, targets, k)
	cs, ce := p.c.TokenStats(h.c, w.c, targets, k)
	if ge != nil || ce != nil {
		p.t.Fatalf("TokenStats: cuda %v, cpu %v", ge, ce)
	}
	var maxLP, maxH float64
	rankOff, topOff := 0, 0
	for r := range cs {
		g, c := gs[r], cs[r]
		if g.Rank != c.Rank {
			rankOff++
		}
		if fmt.Sprint(g.TopIDs) != fmt.Sprint(c.TopIDs) {
			topOff++
		}
		if exact && (g.Rank != c.Rank || fmt.Sprint(g.TopIDs) != fmt.Sprint(c.TopIDs)) {
			p.t.Errorf("TokenStats row %d: rank %d, top %v; cpu: rank %d, top %v", r, g.Rank, g.TopIDs, c.Rank, c.TopIDs)
		}
		if !exact && math.Abs(float64(g.Rank-c.Rank)) > 3 {
			p.t.Errorf("TokenStats row %d: rank %d, cpu %d", r, g.Rank, c.Rank)
		}
		maxLP = max(maxLP, math.Abs(float64(g.Logprob-c.Logprob)))
		maxH = max(maxH, math.Abs(float64(g.Entropy-c.Entropy)))
		for j := range c.TopLogp {
			maxLP = max(maxLP, math.Abs(float64(g.TopLogp[j]-c.TopLogp[j])))
		}
	}
	p.t.Logf("TokenStats %d rows x %d vocab: %d ranks and %d top-id lists differ from the CPU backend's; max |dlogprob| %.3g, max |dentropy| %.3g",
		rows, vocab, rankOff, topOff, maxLP, maxH)
	bound := 1e-5 // double sums, float32 outputs
	if !exact {
		bound = 0.05 // logits one bfloat16 ulp (up to 2^-8 of their size) apart
	}
	if maxLP > bound || maxH > bound {
		p.t.Errorf("TokenStats: max |dlogprob| %.3g, max |dentropy| %.3g: want <= %g", maxLP, maxH, bound)
	}
}
