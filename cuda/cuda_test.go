package cuda_test

import (
	"testing"

	"github.com/potato-k3/potato-k3/cuda"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/ops/opstest"
)

// newBackend makes a CUDA backend for a test, or skips the test saying what is missing. Sync makes every
// op wait for its kernels, so a fault is reported by the op that caused it.
func newBackend(t testing.TB, p ops.Precision) *cuda.Backend {
	t.Helper()
	return newBackendWith(t, cuda.Options{Precision: p, Sync: true})
}

// newBackendWith is newBackend with other options.
func newBackendWith(t testing.TB, o cuda.Options) *cuda.Backend {
	t.Helper()
	if err := cuda.Available(); err != nil {
		t.Skipf("CUDA backend not available on this machine (the CPU backend is the fallback): %v", err)
	}
	b, err := cuda.New(o)
	if err != nil {
		t.Fatalf("cuda.New(%+v): %v", o, err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// TestConformanceCUDACores runs the shared suite with every matmul on the CUDA cores (kernel version 1;
// TestConformance covers the tensor-core matmul of BF16 precision).
func TestConformanceCUDACores(t *testing.T) {
	if err := cuda.Available(); err != nil {
		t.Skipf("CUDA backend not available on this machine (the CPU backend is the fallback): %v", err)
	}
	backends := map[ops.Precision]*cuda.Backend{}
	for _, p := range []ops.Precision{ops.BF16, ops.FP32} {
		backends[p] = newBackendWith(t, cuda.Options{Precision: p, Sync: true, NoTensorCores: true})
	}
	opstest.RunAll(t, func(p ops.Precision) ops.Backend { return backends[p] })
}

// TestConformance runs the shared suite on the CUDA backend in both precisions.
func TestConformance(t *testing.T) {
	if err := cuda.Available(); err != nil {
		t.Skipf("CUDA backend not available on this machine (the CPU backend is the fallback): %v", err)
	}
	backends := map[ops.Precision]*cuda.Backend{} // made here: newBackend may stop the test
	for _, p := range []ops.Precision{ops.BF16, ops.FP32} {
		b := newBackend(t, p)
		info := b.Device()
		t.Logf("%s: %s (sm %d.%d, %d SMs, %.1f GiB), driver %s (%s), NVRTC %s (%s), kernels for %s (%d compiled, %d cached)",
			p, info.Name, info.Major, info.Minor, info.Multiprocessors, float64(info.TotalMemory)/(1<<30),
			info.Driver, info.DriverLib, info.NVRTCVersion, info.NVRTC, info.Arch, info.KernelsCompiled, info.KernelsCached)
		backends[p] = b
	}
	opstest.RunAll(t, func(p ops.Precision) ops.Backend { return backends[p] })
}

// TestKernelCache: a backend made with an empty cache directory compiles every kernel file; the next one
// reads them all from the cache.
func TestKernelCache(t *testing.T) {
	if err := cuda.Available(); err != nil {
		t.Skipf("CUDA backend not available on this machine: %v", err)
	}
	dir := t.TempDir()
	for i, want := range []struct{ compiled, cached bool }{{true, false}, {false, true}} {
		b, err := cuda.New(cuda.Options{Precision: ops.BF16, CacheDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		info := b.Device()
		t.Logf("backend %d: %d kernel files compiled, %d from the cache", i, info.KernelsCompiled, info.KernelsCached)
		if (info.KernelsCompiled > 0) != want.compiled || (info.KernelsCached > 0) != want.cached {
			t.Errorf("backend %d: %d compiled, %d cached: want compiled %v, cached %v", i, info.KernelsCompiled, info.KernelsCached, want.compiled, want.cached)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClosed: a closed backend returns errors, never panics, and a second Close is a no-op.
func TestClosed(t *testing.T) {
	if err := cuda.Available(); err != nil {
		t.Skipf("CUDA backend not available on this machine: %v", err)
	}
	b, err := cuda.New(cuda.Options{Precision: ops.FP32})
	if err != nil {
		t.Fatal(err)
	}
	x, err := b.FromHost(1, 2, []float32{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := b.ToHost(x); err == nil {
		t.Error("ToHost after Close: no error")
	}
	b.Free(x) // ignored
}
