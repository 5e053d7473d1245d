package cuda

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestKernelsParseAsCpp: every kernel file parses, and instantiates its templates, as C++17 under g++
// with host stand-ins for CUDA's built-ins (testdata/cuda_host_prelude.h). NVRTC compiles the kernels
// only on the GPU machine, where a typo costs a device call; here it shows on any machine with g++. It
// checks names, types and syntax, not what the device does (inline PTX is not assembled). Skipped where
// g++ is not installed.
func TestKernelsParseAsCpp(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("no g++ on this machine")
	}
	prelude, err := filepath.Abs(filepath.Join("testdata", "cuda_host_prelude.h"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := kernelFS.ReadDir("kernels")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if filepath.Ext(f.Name()) != ".cu" {
			continue
		}
		n++
		t.Run(f.Name(), func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(gxx, "-std=c++17", "-fsyntax-only", "-w", "-fpermissive", "-include", prelude, "-x", "c++", f.Name())
			cmd.Dir = "kernels"
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("g++ %s: %v\n%s", f.Name(), err, out)
			}
		})
	}
	if n == 0 {
		t.Fatal("no kernel files found")
	}
}
