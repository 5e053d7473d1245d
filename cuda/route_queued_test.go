package cuda_test

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/potato-k3/potato-k3/cuda"
	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// routeInputs uploads rows x cols activations, an experts x cols bfloat16 router and its float32 bias.
func routeInputs(t *testing.T, b *cuda.Backend, rng *rand.Rand, rows, cols, experts int) (x, w, bias ops.Tensor) {
	t.Helper()
	xv := make([]float32, rows*cols)
	for i := range xv {
		xv[i] = bf16.Round(float32(rng.NormFloat64()))
	}
	wr := make([]byte, 2*experts*cols)
	for i := 0; i < len(wr); i += 2 {
		binary.LittleEndian.PutUint16(wr[i:], uint16(bf16.FromFloat32(float32(rng.NormFloat64()/math.Sqrt(float64(cols))))))
	}
	br := make([]byte, 4*experts)
	for e := range experts {
		binary.LittleEndian.PutUint32(br[4*e:], math.Float32bits(float32(0.05*rng.NormFloat64())))
	}
	var err error
	if x, err = b.FromHost(rows, cols, xv); err != nil {
		t.Fatal(err)
	}
	if w, err = b.Upload(ops.WeightBF16, experts, cols, wr); err != nil {
		t.Fatal(err)
	}
	if bias, err = b.Upload(ops.WeightF32, 1, experts, br); err != nil {
		t.Fatal(err)
	}
	return x, w, bias
}

// TestQueueRouteBusy: without Sync (so that the stream really runs behind the host), a queued routing
// of a MoE slice's shape waited for after a matmul queued behind it equals Route's bit for bit, a second
// QueueRoute while one is pending, and one after a larger, which grows the route buffer, too; Wait after
// Close fails instead of reading the freed buffer.
func TestQueueRouteBusy(t *testing.T) {
	b := newBackendWith(t, cuda.Options{Precision: ops.BF16})
	rng := rand.New(rand.NewPCG(3, 5))
	const cols, experts, k = 1024, 384, 8
	w2 := make([]byte, 2*cols*cols) // a matmul's weight, to keep the stream busy behind the routing
	wt, err := b.Upload(ops.WeightBF16, cols, cols, w2)
	if err != nil {
		t.Fatal(err)
	}
	for _, rows := range []int{3000, 20000, 70000} {
		x, w, bias := routeInputs(t, b, rng, rows, cols, experts)
		want, err := b.Route(x, w, bias, k, 2.5)
		if err != nil {
			t.Fatal(err)
		}
		p, err := b.QueueRoute(x, w, bias, k, 2.5)
		if err != nil {
			t.Fatal(err)
		}
		busy, err := b.MatMul(x, wt)
		if err != nil {
			t.Fatal(err)
		}
		q, err := b.QueueRoute(x, w, bias, k, 2.5) // the buffer is held: Route's way
		if err != nil {
			t.Fatal(err)
		}
		for i, pr := range []ops.PendingRouting{q, p} {
			got, err := pr.Wait()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.IDs, want.IDs) || !slices.Equal(got.Weights, want.Weights) {
				t.Errorf("%d rows, routing %d: differs from Route's", rows, i)
			}
		}
		b.Free(busy)
		b.Free(x)
		b.Free(w)
		b.Free(bias)
	}
	x, w, bias := routeInputs(t, b, rng, 100, cols, experts)
	p, err := b.QueueRoute(x, w, bias, k, 2.5)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); !errors.Is(err, cuda.ErrClosed) {
		t.Errorf("Wait after Close: %v, want an error wrapping ErrClosed", err)
	}
}
