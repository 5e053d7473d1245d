package bind

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Sentinels for errors.Is.
var (
	// ErrUnavailable marks a missing library, symbol or device (the message says which).
	ErrUnavailable = errors.New("cuda: not available")
	// ErrCUDA marks a failed driver, NVRTC or cuBLASLt call (*Error carries the call and code).
	ErrCUDA = errors.New("cuda: call failed")
	// ErrOutOfMemory marks an allocation the device could not satisfy (an *Error named
	// CUDA_ERROR_OUT_OF_MEMORY; not a sticky error: the context stays usable).
	ErrOutOfMemory = errors.New("cuda: out of memory")
	// ErrCompile marks a kernel that NVRTC could not compile (the message carries its log).
	ErrCompile = errors.New("cuda: kernel compilation failed")
)

// dlopenFirst opens the first library of names that loads; the error lists every failure.
func dlopenFirst(what string, names []string) (uintptr, string, error) {
	var errs []error
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		if filepath.IsAbs(n) {
			if _, err := os.Stat(n); err != nil {
				continue // not there: not worth a line in the error
			}
		}
		h, err := purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, n, nil
		}
		errs = append(errs, err) // dlerror names the file
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("no candidate file exists"))
	}
	return 0, "", fmt.Errorf("%w: %s: %w", ErrUnavailable, what, errors.Join(errs...))
}

// symbols resolves name -> *uintptr in library h (lib names it in errors). A name may list alternatives
// separated by '|', tried in order (versioned entry points first); a name starting with '?' is optional
// (left 0 when missing).
func symbols(lib string, h uintptr, syms map[string]*uintptr) error {
	for names, dst := range syms {
		optional := strings.HasPrefix(names, "?")
		names = strings.TrimPrefix(names, "?")
		var err error
		for _, n := range splitAlternatives(names) {
			var p uintptr
			if p, err = purego.Dlsym(h, n); err == nil && p != 0 {
				*dst = p
				break
			}
		}
		if *dst == 0 && !optional {
			return fmt.Errorf("%w: %s has no symbol %s: %v", ErrUnavailable, lib, names, err)
		}
	}
	return nil
}

func splitAlternatives(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '|' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

// toolkitCandidates lists where a CUDA toolkit library (base "libnvrtc", "libcublasLt") is looked for:
// the path in $env, then for versions 13 and 12 the loader's path, the toolkit's usual homes, and the
// copies NVIDIA's Python wheels install (nvidia/cuXX/lib, or nvidia/<wheelDir>/lib).
func toolkitCandidates(env, base, wheelDir string) []string {
	var c []string
	if p := os.Getenv(env); p != "" {
		c = append(c, p)
	}
	for _, v := range []string{"13", "12"} {
		lib := base + ".so." + v
		c = append(c, lib, "/usr/local/cuda/lib64/"+lib, "/usr/local/cuda/targets/x86_64-linux/lib/"+lib)
		for _, pattern := range []string{
			"/usr/local/cuda-" + v + "*/lib64/" + lib,
			"/opt/*/.venv/lib/python3*/site-packages/nvidia/cu" + v + "/lib/" + lib,
			"/usr/local/lib/python3*/dist-packages/nvidia/cu" + v + "/lib/" + lib,
			"/usr/local/lib/python3*/dist-packages/nvidia/" + wheelDir + "/lib/" + lib,
		} {
			m, _ := filepath.Glob(pattern)
			sort.Strings(m)
			c = append(c, m...)
		}
	}
	return c
}

// Call invokes a C entry point whose result is a 32-bit enum (CUresult, nvrtcResult, cublasStatus_t) and
// returns it. Pointers converted to uintptr in the call's arguments stay alive and in place for the call.
//
//go:uintptrescapes
func Call(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return uintptr(uint32(r)) // a C enum is 32 bits; the upper half of the register is undefined
}

// GoString copies a NUL-terminated C string.
func GoString(p *byte) string {
	if p == nil {
		return ""
	}
	var n int
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// CString returns s as a NUL-terminated byte slice (keep it alive across the call that reads it).
func CString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}

// VersionString formats a CUDA version number (1000*major + 10*minor) as "major.minor".
func VersionString(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// Error is a failed CUDA driver or NVRTC call. errors.Is(err, ErrCUDA) holds for it.
type Error struct {
	Call string // the API function, e.g. "cuLaunchKernel(matmul_bf16)"
	Code int    // its CUresult or nvrtcResult
	Name string // the code's name, e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Text string // the library's description
}

// Error formats the call, the code's name and number, and the description.
func (e *Error) Error() string {
	return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Call, e.Name, e.Code, e.Text)
}

// Is makes errors.Is(err, ErrCUDA) true for every *Error, and errors.Is(err, ErrOutOfMemory) for an
// allocation the device could not satisfy.
func (e *Error) Is(target error) bool {
	return target == ErrCUDA || (target == ErrOutOfMemory && e.Name == "CUDA_ERROR_OUT_OF_MEMORY")
}
