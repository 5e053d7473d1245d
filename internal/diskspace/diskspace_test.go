package diskspace

import (
	"runtime"
	"testing"
)

// The test's own temporary directory has some room; a path that does not exist is not examined.
func TestFree(t *testing.T) {
	n, ok := Free(t.TempDir())
	if runtime.GOOS != "windows" && runtime.GOOS != "plan9" && (!ok || n <= 0) {
		t.Errorf("Free(temp dir) = %d, %v: want some room, known", n, ok)
	}
	if _, ok := Free("/no/such/directory/here"); ok {
		t.Error("Free of a missing path says it knows")
	}
}
