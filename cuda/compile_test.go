package cuda

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// TestKernelsCompile compiles every kernel file with NVRTC, then again from the cache, then as production
// builds them (without the dev kernels). It needs NVRTC
// only, no GPU: set POTATO_NVRTC to a libnvrtc to run it on a machine without CUDA. The target is
// $POTATO_CUDA_ARCH, else sm_90 (which every NVRTC since 11.8 knows).
func TestKernelsCompile(t *testing.T) {
	nv, err := bind.LoadNVRTC()
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
	t.Logf("NVRTC %d.%d (%s): %d kernel files for %s in %v", nv.Major, nv.Minor, nv.Path, len(images), arch, time.Since(start))
	for _, kf := range kernelFiles { // each kernel the backend looks up is in its file's image (by name)
		for _, k := range kf.loaded() {
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

	// Production's build (no dev kernels, kernels.go's devKernels unset outside the tests) compiles too,
	// holds its kernels and none of the dev ones, and is cached apart from the tests' build.
	devKernels = false
	defer func() { devKernels = true }()
	prod, cached, err := compileAll(nv, arch, dir)
	if err != nil {
		t.Fatalf("production build: %v", err)
	}
	if cached != 0 {
		t.Errorf("production build: %d files came from the tests' cache entries", cached)
	}
	for _, kf := range kernelFiles {
		for _, k := range kf.kernels {
			if !bytes.Contains(prod[kf.file], []byte(k+"\x00")) && !bytes.Contains(prod[kf.file], []byte(".entry "+k)) {
				t.Errorf("production build: %s: kernel %s not in the compiled image", kf.file, k)
			}
		}
		for _, k := range kf.dev {
			if bytes.Contains(prod[kf.file], []byte(k+"\x00")) || bytes.Contains(prod[kf.file], []byte(".entry "+k)) {
				t.Errorf("production build: %s: dev kernel %s is in the image", kf.file, k)
			}
		}
	}
}
