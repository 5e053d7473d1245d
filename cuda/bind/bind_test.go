package bind

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestCuBLASLtMissing: without the library the error wraps ErrUnavailable and says which library and
// which variable names its path (no GPU needed).
func TestCuBLASLtMissing(t *testing.T) {
	_, err := openCuBLASLt([]string{"/nonexistent/libcublasLt.so.13", "libcublasLt-not-a-library.so.13"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want an error wrapping ErrUnavailable", err)
	}
	for _, want := range []string{"cuBLASLt", LtLibEnv, "libcublasLt-not-a-library.so.13"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	t.Setenv(LtLibEnv, "/some/where/libcublasLt.so.13")
	if c := ltCandidates(); len(c) == 0 || c[0] != "/some/where/libcublasLt.so.13" {
		t.Errorf("$%s is not the first candidate: %v", LtLibEnv, c)
	}
}

// TestErrorIs: an *Error matches ErrCUDA, and ErrOutOfMemory only when it is the driver's out-of-memory
// code; wrapped, it still does.
func TestErrorIs(t *testing.T) {
	oom := &Error{Call: "cuMemAllocAsync(1 bytes)", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Text: "out of memory"}
	other := &Error{Call: "cuLaunchKernel(k)", Code: 700, Name: "CUDA_ERROR_ILLEGAL_ADDRESS", Text: "an illegal memory access"}
	for _, c := range []struct {
		err       error
		cuda, mem bool
	}{{oom, true, true}, {other, true, false}, {fmt.Errorf("op: %w", oom), true, true}, {errors.New("x"), false, false}} {
		if got := errors.Is(c.err, ErrCUDA); got != c.cuda {
			t.Errorf("%v: errors.Is(ErrCUDA) %v, want %v", c.err, got, c.cuda)
		}
		if got := errors.Is(c.err, ErrOutOfMemory); got != c.mem {
			t.Errorf("%v: errors.Is(ErrOutOfMemory) %v, want %v", c.err, got, c.mem)
		}
	}
}

// TestSplitAlternatives: a symbol list "a|b" is tried in order.
func TestSplitAlternatives(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{{"cuEventElapsedTime_v2|cuEventElapsedTime", []string{"cuEventElapsedTime_v2", "cuEventElapsedTime"}}, {"cuInit", []string{"cuInit"}}} {
		if got := splitAlternatives(c.in); strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("splitAlternatives(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestImageKind: a virtual architecture gives PTX, a real one CUBIN.
func TestImageKind(t *testing.T) {
	for arch, want := range map[string]string{"sm_90a": "cubin", "sm_80": "cubin", "compute_90": "ptx"} {
		if got := ImageKind(arch); got != want {
			t.Errorf("ImageKind(%q) = %q, want %q", arch, got, want)
		}
	}
}
