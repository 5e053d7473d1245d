package cpu_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestInterrupt: every op that runs tasks returns an error wrapping the context's once a context
// registered with Interrupt has ended, naming the op; with a live context registered, and again after an
// ended one is released, it returns the bits it returns unregistered.
func TestInterrupt(t *testing.T) {
	b := cpu.New(cpu.Options{Precision: ops.BF16, Threads: 2})
	g := newGen(t, b, 3)
	const rows, cols, heads, d = 40, 64, 2, 32
	l := ops.Layout{Starts: []int{0, 17, rows}}
	x, y, gate := g.act(rows, cols, 1), g.act(rows, cols, 1), g.act(rows, cols, 1)
	w, norm := g.weight(48, cols, 0.1), g.weight(1, cols, 1)
	taps := g.weight(cols, 4, 0.5)
	braw, aLog, dtBias := g.act(rows, heads, 1), g.weight(1, heads, 0.5), g.weight(1, cols, 0.5)
	const nope, shared, vdim = 16, 8, 16
	q, kv, ks := g.act(rows, heads*(nope+shared), 1), g.act(rows, heads*(nope+vdim), 1), g.act(rows, shared, 1)
	router, bias := g.weight(8, cols, 0.1), g.weight(1, 8, 0.1)
	experts := []ops.Expert{g.expert(1, cols, 32, g.expertBytes(cols, 32)), g.expert(5, cols, 32, g.expertBytes(cols, 32))}
	rt := g.routing(rows, 2, 8)
	targets := make([]int32, rows)
	bits := make([]uint16, rows*cols)
	tensor := func(x ops.Tensor, err error) ([]float32, error) {
		if err != nil {
			return nil, err
		}
		return b.ToHost(x)
	}
	for _, tt := range []struct {
		op  string
		run func() ([]float32, error)
	}{
		{"MatMul", func() ([]float32, error) { return tensor(b.MatMul(x, w)) }},
		{"Add", func() ([]float32, error) { return tensor(b.Add(x, y)) }},
		{"RMSNorm", func() ([]float32, error) { return tensor(b.RMSNorm(x, norm, 1e-6)) }},
		{"GatedRMSNorm", func() ([]float32, error) { return tensor(b.GatedRMSNorm(x, norm, gate, 1e-6)) }},
		{"MulSigmoid", func() ([]float32, error) { return tensor(b.MulSigmoid(x, gate)) }},
		{"SiTUGLU", func() ([]float32, error) { return tensor(b.SiTUGLU(x, y, 4, 8)) }},
		{"AttnResMix", func() ([]float32, error) {
			out, p, err := b.AttnResMix([]ops.Tensor{x, y, gate}, norm)
			if err != nil {
				return nil, err
			}
			v, err := b.ToHost(out)
			return append(v, p...), err
		}},
		{"ShortConvSiLU", func() ([]float32, error) { return tensor(b.ShortConvSiLU(x, taps, l)) }},
		{"KDA", func() ([]float32, error) { return tensor(b.KDA(x, y, gate, x, braw, aLog, dtBias, heads, -5, l)) }},
		{"MLA", func() ([]float32, error) { return tensor(b.MLA(q, kv, ks, heads, nope, shared, vdim, l)) }},
		{"Route", func() ([]float32, error) {
			r, err := b.Route(x, router, bias, 2, 2.5)
			if err != nil {
				return nil, err
			}
			v := r.Weights
			for _, id := range r.IDs {
				v = append(v, float32(id))
			}
			return v, nil
		}},
		{"ExpertsAccumulate", func() ([]float32, error) {
			acc, err := b.Zeros(rows, cols)
			if err != nil {
				return nil, err
			}
			if err := b.ExpertsAccumulate(acc, x, rt, experts, 4, 8); err != nil {
				return nil, err
			}
			return b.ToHost(acc)
		}},
		{"TokenStats", func() ([]float32, error) {
			st, err := b.TokenStats(x, w, targets, 3)
			var v []float32
			for _, s := range st {
				v = append(v, s.Logprob, s.Entropy, float32(s.Rank))
			}
			return v, err
		}},
		{"ToHostBF16", func() ([]float32, error) {
			if err := b.ToHostBF16(x, bits); err != nil {
				return nil, err
			}
			return tensor(b.FromHost(rows, cols, widen(bits)))
		}},
		{"FromHostBF16", func() ([]float32, error) { return tensor(b.FromHostBF16(rows, cols, bits)) }},
	} {
		t.Run(tt.op, func(t *testing.T) {
			want, err := tt.run()
			if err != nil {
				t.Fatal(err)
			}
			live, stop := context.WithCancel(context.Background())
			defer stop()
			release := b.Interrupt(live)
			got, err := tt.run()
			release()
			if err != nil {
				t.Fatalf("with a live context: %v", err)
			}
			sameBits(t, "with a live context", got, want)

			for _, end := range []error{context.Canceled, context.DeadlineExceeded} {
				ctx, cancel := context.WithCancel(context.Background())
				if end == context.DeadlineExceeded {
					ctx, cancel = context.WithTimeout(context.Background(), 0)
				}
				release := b.Interrupt(ctx)
				cancel()
				<-ctx.Done()
				_, err = tt.run()
				release()
				release() // a second release is a no-op
				if !errors.Is(err, end) || !strings.Contains(err.Error(), tt.op) {
					t.Errorf("after %v: err = %v, want one wrapping it and naming %s", end, err, tt.op)
				}
				got, err = tt.run()
				if err != nil {
					t.Fatalf("after release: %v", err)
				}
				sameBits(t, "after release", got, want)
			}
		})
	}
}

// TestInterruptOverlapping: of two registrations, the one whose context ended stops ops until it is
// released, whatever the other does; a context that never ends registers nothing.
func TestInterruptOverlapping(t *testing.T) {
	b := cpu.New(cpu.Options{Precision: ops.BF16, Threads: 2})
	g := newGen(t, b, 4)
	x, w := g.act(8, 16, 1), g.weight(8, 16, 1)
	run := func() error { _, err := b.MatMul(x, w); return err }

	never := b.Interrupt(context.Background())
	a, stopA := context.WithCancel(context.Background())
	c, stopC := context.WithCancel(context.Background())
	defer stopC()
	relA, relC := b.Interrupt(a), b.Interrupt(c)
	if err := run(); err != nil {
		t.Fatalf("both live: %v", err)
	}
	stopA()
	<-a.Done()
	if err := run(); !errors.Is(err, context.Canceled) {
		t.Fatalf("one ended: err = %v", err)
	}
	relC()
	if err := run(); !errors.Is(err, context.Canceled) {
		t.Fatalf("the live one released, the ended one still registered: err = %v", err)
	}
	relA()
	never()
	if err := run(); err != nil {
		t.Fatalf("all released: %v", err)
	}
}

func widen(bits []uint16) []float32 {
	v := make([]float32, len(bits))
	for i, h := range bits {
		v[i] = math.Float32frombits(uint32(h) << 16)
	}
	return v
}
