package cuda

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

// testKDAEnv names a KDA version that this test binary makes the BF16 default (kdaBF16Version) before
// any test runs (POTATO_TEST_KDA_VERSION=8), so that one binary checks a candidate default end to end
// (TestAgainstCPU, TestBatchInvarianceLarge, TestConformance) before kdaBF16Version is changed in the source.
// TestKDADefaultVersion fails by construction then; leave it out of such a run.
const testKDAEnv = "POTATO_TEST_KDA_VERSION"

func init() {
	s := os.Getenv(testKDAEnv)
	if s == "" {
		return
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 3 || v > maxKDAVersion {
		panic(fmt.Sprintf("%s=%q: want a KDA version from 3 to %d", testKDAEnv, s, maxKDAVersion))
	}
	kdaBF16Version = v
}

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
