package cuda

import (
	"bytes"
	"os"
	"testing"
	"time"
)

// TestKernelsCompile compiles every kernel file with NVRTC, then again from the cache. It needs NVRTC
// only, no GPU: set POTATO_NVRTC to a libnvrtc to run it on a machine without CUDA. The target is
// $POTATO_CUDA_ARCH, else sm_90 (which every NVRTC since 11.8 knows).
func TestKernelsCompile(t *testing.T) {
	nv, err := loadNVRTC()
	if err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	arch := os.Getenv(archEnv)
	if arch == "" {
		arch = "sm_90"
	}
	dir := t.TempDir()
	start := time.Now()
	images, cached, err := compileAll(nv, arch, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NVRTC %d.%d (%s): %d kernel files for %s in %v", nv.major, nv.minor, nv.path, len(images), arch, time.Since(start))
	for _, kf := range kernelFiles { // each kernel the backend looks up is in its file's image (by name)
		for _, k := range kf.kernels {
			if !bytes.Contains(images[kf.file], []byte(k+"\x00")) && !bytes.Contains(images[kf.file], []byte(".entry "+k)) {
				t.Errorf("%s: kernel %s not in the compiled image", kf.file, k)
			}
		}
	}
	if cached != 0 {
		t.Errorf("first compile into an empty cache: %d files came from the cache", cached)
	}
	start = time.Now()
	again, cached, err := compileAll(nv, arch, dir)
	if err != nil {
		t.Fatal(err)
	}
	if cached != len(kernelFiles) {
		t.Errorf("second compile: %d of %d files from the cache", cached, len(kernelFiles))
	}
	for name, img := range images {
		if string(again[name]) != string(img) {
			t.Errorf("%s: the cached image differs from the compiled one", name)
		}
	}
	t.Logf("from the cache in %v", time.Since(start))
}

// TestCacheKey: the key changes with the source, a header, an option and the architecture.
func TestCacheKey(t *testing.T) {
	n := &nvrtcLib{major: 13, minor: 0}
	base := kernelSource{name: "a.cu", src: "x", headers: map[string]string{"h.cuh": "y"}}
	k0 := n.cacheKey(base, []string{"--gpu-architecture=sm_90a"}, "cubin")
	variants := map[string]string{
		"source": n.cacheKey(kernelSource{name: "a.cu", src: "x2", headers: base.headers}, []string{"--gpu-architecture=sm_90a"}, "cubin"),
		"header": n.cacheKey(kernelSource{name: "a.cu", src: "x", headers: map[string]string{"h.cuh": "y2"}}, []string{"--gpu-architecture=sm_90a"}, "cubin"),
		"arch":   n.cacheKey(base, []string{"--gpu-architecture=sm_80"}, "cubin"),
		"option": n.cacheKey(base, []string{"--gpu-architecture=sm_90a", "--fmad=false"}, "cubin"),
		"kind":   n.cacheKey(base, []string{"--gpu-architecture=sm_90a"}, "ptx"),
	}
	n2 := &nvrtcLib{major: 13, minor: 1}
	variants["nvrtc version"] = n2.cacheKey(base, []string{"--gpu-architecture=sm_90a"}, "cubin")
	for what, k := range variants {
		if k == k0 {
			t.Errorf("changing the %s leaves the cache key unchanged", what)
		}
	}
	if again := n.cacheKey(base, []string{"--gpu-architecture=sm_90a"}, "cubin"); again != k0 {
		t.Error("the cache key is not deterministic")
	}
}
