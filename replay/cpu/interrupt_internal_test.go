package cpu

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestInterruptWithinATask: KDA's and MLA's tasks run one head of a whole sequence (MLA's a block of its
// queries), seconds each for a long sequence; a cancel in the middle of one stops it within a few steps.
// The cancel comes 20 ms in, and most of the output rows are left unwritten: an op that ran to its end
// (several seconds on two threads) would have written every one. The op then reports the cancel.
func TestInterruptWithinATask(t *testing.T) {
	if testing.Short() {
		t.Skip("a one-sequence KDA and MLA of some seconds each, unless stopped")
	}
	b := New(Options{Precision: ops.BF16, Threads: 2})
	rng := rand.New(rand.NewPCG(1, 2))
	act := func(rows, cols int) *Tensor {
		x := newTensor(rows, cols)
		for i := range x.data {
			x.data[i] = b.r(float32(rng.NormFloat64()))
		}
		return x
	}
	for _, tt := range []struct {
		op      string
		prepare func() (run func() *Tensor) // the inputs made before the clock starts
	}{
		{"KDA", func() func() *Tensor { // 1 head of 96: 200,000 steps of a 96 x 96 state
			const rows, d = 200_000, 96
			q, k, v, g, braw, aLog, dt := act(rows, d), act(rows, d), act(rows, d), act(rows, d), act(rows, 1), act(1, 1), act(1, d)
			return func() *Tensor {
				out, _ := b.kda(q, k, v, g, braw, aLog, dt, 1, -5, ops.Layout{Starts: []int{0, rows}}, nil, false)
				return out
			}
		}},
		{"MLA", func() func() *Tensor { // 2 heads: 24,000 queries, each over the keys before it
			const rows, heads, nope, shared, vdim = 24_000, 2, 64, 32, 64
			q, kv, ks := act(rows, heads*(nope+shared)), act(rows, heads*(nope+vdim)), act(rows, shared)
			return func() *Tensor {
				return b.mla(q, kv, ks, heads, nope, shared, vdim, ops.Layout{Starts: []int{0, rows}}, 0)
			}
		}},
	} {
		t.Run(tt.op, func(t *testing.T) {
			run := tt.prepare()
			start := b.opStart()
			ctx, cancel := context.WithCancel(context.Background())
			release := b.Interrupt(ctx)
			defer release()
			time.AfterFunc(20*time.Millisecond, cancel)
			out := run()
			if err := b.interrupted(tt.op, start); !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want a cancel", err)
			}
			written := 0
			for r := range out.rows {
				for _, v := range out.data[r*out.cols : (r+1)*out.cols] {
					if v != 0 {
						written++
						break
					}
				}
			}
			if written > out.rows/2 {
				t.Errorf("%d of %d rows written after a cancel 20 ms in: the op ran on", written, out.rows)
			}
		})
	}
}

// TestInterruptReleasedMidOp: an op whose tasks a context made skip fails even when that context is
// released before the op returns (another registration's op on a shared backend: the skip and the
// release race), and an op that starts after the release runs whole.
func TestInterruptReleasedMidOp(t *testing.T) {
	b := New(Options{Precision: ops.BF16, Threads: 2})
	live, stop := context.WithCancel(context.Background())
	defer stop()
	releaseLive := b.Interrupt(live) // the other engine's wave, still running
	defer releaseLive()
	ended, cancel := context.WithCancel(context.Background())
	release := b.Interrupt(ended)
	cancel()
	for b.stop.ended.Load() == 0 { // its AfterFunc runs on a goroutine of its own
		time.Sleep(time.Millisecond)
	}
	const n, k = 64, 64
	x, out := make([]float32, n*k), make([]float32, n*n)
	for i := range x {
		x[i] = 1
	}
	began := b.opStart()
	b.gemm(out, x, n, x, n, k, false)
	release()
	if err := b.interrupted("MatMul", began); !errors.Is(err, context.Canceled) {
		t.Fatalf("an op whose tasks were skipped, its context released since: err = %v", err)
	}
	began = b.opStart()
	b.gemm(out, x, n, x, n, k, false)
	if err := b.interrupted("MatMul", began); err != nil {
		t.Fatalf("an op after the release: %v", err)
	}
	for i, v := range out {
		if v != k {
			t.Fatalf("out[%d] = %g after a whole op, want %d", i, v, k)
		}
	}
}
