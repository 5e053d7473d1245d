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
			ctx, cancel := context.WithCancel(context.Background())
			release := b.Interrupt(ctx)
			defer release()
			time.AfterFunc(20*time.Millisecond, cancel)
			out := run()
			if err := b.interrupted(tt.op); !errors.Is(err, context.Canceled) {
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
