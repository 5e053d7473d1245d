package cuda_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/potato-k3/potato-k3/cuda"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/ops/opstest"
)

// TestConformanceTensorCoreKernel runs the shared suite with cuBLASLt off: the project's tensor-core
// kernel (matmul_tc.cu) for the bfloat16 matmuls, which TestConformance no longer reaches where cuBLASLt
// loads.
func TestConformanceTensorCoreKernel(t *testing.T) {
	if err := cuda.Available(); err != nil {
		t.Skipf("CUDA backend not available on this machine (the CPU backend is the fallback): %v", err)
	}
	backends := map[ops.Precision]*cuda.Backend{}
	for _, p := range []ops.Precision{ops.BF16, ops.FP32} {
		backends[p] = newBackendWith(t, cuda.Options{Precision: p, Sync: true, CuBLASLt: cuda.CuBLASLtOff})
		if info := backends[p].Device(); info.CuBLASLt != "" {
			t.Fatalf("CuBLASLtOff: the backend reports cuBLASLt %s", info.CuBLASLt)
		}
	}
	opstest.RunAll(t, func(p ops.Precision) ops.Backend { return backends[p] })
}

// TestCuBLASLtAgainstCPU: the cuBLASLt matmul sums k in its kernel's own order, so like the tensor-core
// kernel its outputs differ from the CPU backend's where a float32 difference crosses a bfloat16
// rounding boundary: rarely, by one bfloat16 ulp. TokenStats runs its lm_head on it too.
func TestCuBLASLtAgainstCPU(t *testing.T) {
	if err := cuda.Available(); err != nil {
		t.Skipf("CUDA backend not available on this machine: %v", err)
	}
	g, err := cuda.New(cuda.Options{Precision: ops.BF16, Sync: true, CuBLASLt: cuda.CuBLASLtRequire})
	if errors.Is(err, cuda.ErrUnavailable) {
		t.Skipf("cuBLASLt not available (the backend runs its own tensor-core kernel without it): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	info := g.Device()
	t.Logf("cuBLASLt %s (%s)", info.CuBLASLtVersion, info.CuBLASLt)
	p := &pair{t: t, g: g, c: cpu.New(cpu.Options{Precision: ops.BF16}), rng: rand.New(rand.NewPCG(7, 1)), bf: true}
	for _, shape := range [][3]int{{130, 1100, 67}, {1, 7168, 300}, {200, 64, 129}, {64, 7168, 1024}, {33, 3584, 512}} {
		n, k, m := shape[0], shape[1], shape[2]
		x, w := p.act(n, k, 1), p.weight(ops.WeightBF16, m, k, 1/math.Sqrt(float64(k)))
		gy, ge := p.g.MatMul(x.g, w.g)
		cy, ce := p.c.MatMul(x.c, w.c)
		gv, cv := p.host(both{gy, cy}, ge, ce)
		p.near(fmt.Sprintf("cuBLASLt MatMul %dx%d by %dx%d", n, k, m, k), gv, cv, 0.02, 1.0/64)
	}
	p.tokenStats(false)
}
