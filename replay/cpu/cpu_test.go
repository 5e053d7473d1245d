package cpu_test

import (
	"testing"

	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/ops/opstest"
)

// TestConformance runs the shared suite on the CPU backend in both precisions.
func TestConformance(t *testing.T) {
	opstest.RunAll(t, func(p ops.Precision) ops.Backend { return cpu.New(cpu.Options{Precision: p}) })
}

// narrowCPU is the CPU backend with an ops.NarrowMatMuler that is MatMul, which the contract allows: the
// suite's MatMulNarrow checks then run on every machine (the CUDA backend's own form needs a GPU).
type narrowCPU struct{ *cpu.Backend }

func (n narrowCPU) MatMulNarrow(x, w ops.Tensor) (ops.Tensor, error) { return n.MatMul(x, w) }

// TestConformanceNarrowMatMul runs the suite on narrowCPU, for its MatMulNarrow checks.
func TestConformanceNarrowMatMul(t *testing.T) {
	opstest.RunAll(t, func(p ops.Precision) ops.Backend { return narrowCPU{cpu.New(cpu.Options{Precision: p})} })
}
