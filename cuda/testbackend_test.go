package cuda

import "testing"

// testBackend makes a backend with opts for one test, closed when the test ends, or skips the test on a
// machine without the CUDA backend, saying why.
func testBackend(t testing.TB, opts Options) *Backend {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("CUDA backend not available on this machine: %v", err)
	}
	b, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// skipTiming skips a timing test under -short.
func skipTiming(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("timing: not with -short")
	}
}
