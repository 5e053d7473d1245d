package cuda

import (
	"os"
	"testing"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// TestPtxasInfo compiles kda.cu ($POTATO_PTXAS_FILE names another kernel file, e.g. norm.cu) with
// ptxas's verbose report (--ptxas-options=-v) and logs, per kernel, the registers, spill stores and
// loads, and stack frame: the NVRTC log that a successful build drops. It needs NVRTC only; the target is
// $POTATO_CUDA_ARCH, else sm_90.
func TestPtxasInfo(t *testing.T) {
	nv, err := bind.LoadNVRTC()
	if err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	arch := os.Getenv(archEnv)
	if arch == "" {
		arch = "sm_90"
	}
	srcs, err := kernelSources()
	if err != nil {
		t.Fatal(err)
	}
	file := os.Getenv("POTATO_PTXAS_FILE")
	if file == "" {
		file = "kda.cu"
	}
	for _, s := range srcs {
		if s.Name != file {
			continue
		}
		opts := append([]string{"--gpu-architecture=" + arch, "--ptxas-options=-v"}, compileOptions()...)
		log, err := nv.BuildLog(s, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("NVRTC %d.%d, %s, ptxas report for %s:\n%s", nv.Major, nv.Minor, arch, s.Name, log)
	}
}
