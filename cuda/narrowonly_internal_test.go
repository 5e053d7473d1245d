package cuda

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestNarrowOnly: every kind of reader of a narrow-only output (narrow.go: RMSNorm's, GatedRMSNorm's and
// MulSigmoid's, whose float32 values are left unwritten) gives the bits it gives with
// Options.EagerWidening, where the producer writes them too: the matmuls that read the copy (MatMul on
// cuBLASLt, Route, TokenStats, the fused SiTUFFN), which must leave the output narrow-only, and the readers
// of float32 values, which widen it first (MatMul over a float32 weight on the CUDA cores, Add and RMSNorm
// reading it raw, Slice, JoinRows, KDA, ToHost, ToHostBF16). Each case checks that the output was
// narrow-only before its reader ran (so the comparison means something) and only then.
func TestNarrowOnly(t *testing.T) {
	b := newLtBackend(t, false)
	rng := rand.New(rand.NewPCG(31, 32))
	const rows, hidden, heads, d = 333, 256, 2, 128
	l := ops.Layout{Starts: []int{0, 100, 101, 333}}
	up := func(r, c int, scale float64) ops.Tensor { // an activation of bfloat16 values
		t.Helper()
		x, err := b.FromHost(r, c, fastFill(rng, r*c, scale))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Free(x) })
		return x
	}
	weight := func(r, c int) ops.Tensor {
		t.Helper()
		w := bf16Weight(t, b, rng, r, c, 1/math.Sqrt(float64(c)))
		t.Cleanup(func() { b.Free(w) })
		return w
	}
	x, gate, other := up(rows, hidden, 1), up(rows, hidden, 2), up(rows, hidden, 1)
	gamma := up(1, hidden, 0.5)
	f32w := up(96, hidden, 1/math.Sqrt(hidden)) // a float32 weight: the CUDA cores' kernel reads x as float32
	proj, router, lmHead := weight(384, hidden), weight(64, hidden), weight(1000, hidden)
	bias := up(1, 64, 0.1)
	ffn := newFFNWeights(t, b, rng, 384, hidden)
	aLog, dtBias := up(1, heads, 0.5), up(1, heads*d, 0.5)
	graw, braw := up(rows, heads*d, 1), up(rows, heads, 1)
	// a matmul reads the copy where its weight's shape has a pinned cuBLASLt algorithm (else it widens)
	lt := func(w ops.Tensor) bool { return ltPlan(t, b, w.Rows(), w.Cols()).ok }
	for _, w := range []ops.Tensor{proj, router, lmHead, ffn.gate} {
		if !lt(w) {
			t.Logf("%dx%d: no pinned cuBLASLt algorithm, so its reader widens", w.Rows(), w.Cols())
		}
	}
	targets := make([]int32, rows)
	for i := range targets {
		targets[i] = int32(rng.IntN(1000))
	}
	producers := []struct {
		name string
		op   func() (ops.Tensor, error)
	}{
		{"RMSNorm", func() (ops.Tensor, error) { return b.RMSNorm(x, gamma, 1e-5) }},
		{"GatedRMSNorm", func() (ops.Tensor, error) { return b.GatedRMSNorm(x, gamma, gate, 1e-5) }},
		{"MulSigmoid", func() (ops.Tensor, error) { return b.MulSigmoid(x, gate) }},
	}
	// a reader returns what it computed as float32 values, and whether the source may stay narrow-only
	type result struct {
		v    []float32
		any  any // a result that is not a tensor (routing, token statistics)
		keep bool
	}
	host := func(y ops.Tensor, err error) (result, error) {
		if err != nil {
			return result{}, err
		}
		defer b.Free(y)
		v, err := b.ToHost(y)
		return result{v: v}, err
	}
	readers := []struct {
		name string
		read func(n ops.Tensor) (result, error)
	}{
		{"MatMul", func(n ops.Tensor) (result, error) {
			r, err := host(b.MatMul(n, proj))
			r.keep = lt(proj)
			return r, err
		}},
		{"Route", func(n ops.Tensor) (result, error) {
			rt, err := b.Route(n, router, bias, 4, 2.5)
			return result{any: [2]any{rt.IDs, rt.Weights}, keep: lt(router)}, err
		}},
		{"TokenStats", func(n ops.Tensor) (result, error) {
			st, err := b.TokenStats(n, lmHead, targets, 5)
			return result{any: st, keep: lt(lmHead)}, err
		}},
		{"SiTUFFN", func(n ops.Tensor) (result, error) {
			r, err := host(b.SiTUFFN(n, ffn.gate, ffn.up, ffn.down, 4, 25))
			r.keep = ffnPath(t, b, n, ffn) == ""
			return r, err
		}},
		{"MatMul, float32 weight", func(n ops.Tensor) (result, error) { return host(b.MatMul(n, f32w)) }},
		{"Add", func(n ops.Tensor) (result, error) { return host(b.Add(n, other)) }},
		{"RMSNorm", func(n ops.Tensor) (result, error) { return host(b.RMSNorm(n, gamma, 1e-5)) }},
		{"Slice", func(n ops.Tensor) (result, error) { return host(b.Slice(n, 64, 200)) }},
		{"JoinRows", func(n ops.Tensor) (result, error) { return host(b.JoinRows([]ops.Tensor{other, n, other})) }},
		{"KDA", func(n ops.Tensor) (result, error) {
			return host(b.KDA(n, other, n, graw, braw, aLog, dtBias, heads, -5, l))
		}},
		{"ToHost", func(n ops.Tensor) (result, error) {
			v, err := b.ToHost(n)
			return result{v: v}, err
		}},
		{"ToHostBF16", func(n ops.Tensor) (result, error) {
			raw := make([]uint16, n.Rows()*n.Cols())
			err := b.ToHostBF16(n, raw)
			v := make([]float32, len(raw))
			for i, u := range raw {
				v[i] = math.Float32frombits(uint32(u) << 16)
			}
			return result{v: v, keep: true}, err
		}},
		{"MatMul, then Add", func(n ops.Tensor) (result, error) { // the copy read, then the values widened
			a, err := host(b.MatMul(n, proj))
			if err != nil {
				return a, err
			}
			s, err := host(b.Add(n, other))
			return result{v: append(a.v, s.v...)}, err
		}},
	}
	for _, p := range producers {
		for _, r := range readers {
			name := p.name + " -> " + r.name
			run := func(eager bool) (result, error) {
				b.opts.EagerWidening = eager
				y, err := p.op()
				if err != nil {
					return result{}, err
				}
				defer b.Free(y)
				if only := y.(*Tensor).narrowOnly; only == eager {
					t.Errorf("%s: EagerWidening %v, the output is narrow-only: %v", name, eager, only)
				}
				res, err := r.read(y)
				if err == nil && !eager && y.(*Tensor).narrowOnly != res.keep {
					t.Errorf("%s: after the reader the output is narrow-only: %v, want %v", name, y.(*Tensor).narrowOnly, res.keep)
				}
				return res, err
			}
			want, err := run(true)
			if err != nil {
				t.Errorf("%s, eager: %v", name, err)
				continue
			}
			got, err := run(false)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if want.any != nil {
				if !reflect.DeepEqual(got.any, want.any) {
					t.Errorf("%s: results differ from EagerWidening's", name)
				}
				continue
			}
			sameBits(t, name, got.v, want.v, 1)
		}
	}
	b.opts.EagerWidening = false
}
