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
