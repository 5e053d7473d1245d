package cuda

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// TestKernelsParseAsCpp: every kernel file parses, and instantiates its templates, as C++17 under g++
// with host stand-ins for CUDA's built-ins (testdata/cuda_host_prelude.h). NVRTC compiles the kernels
// only on the GPU machine, where a typo costs a device call; here it shows on any machine with g++. It
// checks names, types and syntax, not what the device does (inline PTX is not assembled). Skipped where
// g++ is not installed.
func TestKernelsParseAsCpp(t *testing.T) {
	gxx, prelude := hostCpp(t)
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
			cmd := exec.Command(gxx, "-std=c++17", "-fsyntax-only", "-w", "-fpermissive", "-DPOTATO_DEV_KERNELS", "-include", prelude, "-x", "c++", f.Name())
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

// TestKernelFilesListEveryKernel: kernelFiles names exactly the extern "C" kernels each file defines, macro
// expansions included (g++ -E with the host prelude, __global__ marked): the backend loads kernels by
// those lists, so a kernel missing from its file's list fails only at its first launch on the device
// (run 90 lost a call to one). Both builds: production's (the kernels lists) and the tests' with
// POTATO_DEV_KERNELS (the dev lists too). Skipped where g++ is not installed.
func TestKernelFilesListEveryKernel(t *testing.T) {
	gxx, prelude := hostCpp(t)
	mark := filepath.Join(t.TempDir(), "mark.h")
	if err := os.WriteFile(mark, []byte("#undef __global__\n#define __global__ POTATO_KERNEL\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	def := regexp.MustCompile(`extern\s+"C"\s+POTATO_KERNEL\s+void\s+(\w+)\s*\(`)
	for _, kf := range kernelFiles {
		for _, dev := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/dev=%v", kf.file, dev), func(t *testing.T) {
				t.Parallel()
				args := []string{"-std=c++17", "-E", "-P", "-w", "-include", prelude, "-include", mark}
				want := slices.Clone(kf.kernels)
				if dev {
					args = append(args, "-DPOTATO_DEV_KERNELS")
					want = append(want, kf.dev...)
				}
				cmd := exec.Command(gxx, append(args, "-x", "c++", kf.file)...)
				cmd.Dir = "kernels"
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("g++ -E %s: %v", kf.file, err)
				}
				var got []string
				for _, m := range def.FindAllSubmatch(out, -1) {
					got = append(got, string(m[1]))
				}
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("%s (dev kernels %v) defines %v; kernelFiles lists %v", kf.file, dev, got, want)
				}
			})
		}
	}
}

// hostCpp returns g++'s path and the host prelude's (testdata/cuda_host_prelude.h), or skips the test
// where g++ is not installed; with POTATO_REQUIRE_TOOLS=1 (CI, .ci/run) a missing g++ fails it instead.
func hostCpp(t *testing.T) (gxx, prelude string) {
	t.Helper()
	gxx, err := exec.LookPath("g++")
	if err != nil {
		if os.Getenv("POTATO_REQUIRE_TOOLS") == "1" {
			t.Fatal("no g++ on this machine, and POTATO_REQUIRE_TOOLS=1: install g++ (.ci/run does)")
		}
		t.Skip("no g++ on this machine")
	}
	prelude, err = filepath.Abs(filepath.Join("testdata", "cuda_host_prelude.h"))
	if err != nil {
		t.Fatal(err)
	}
	return gxx, prelude
}
