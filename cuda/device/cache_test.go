package device

import (
	"testing"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// TestCacheKey: the key changes with the source, a header, an option and the architecture.
func TestCacheKey(t *testing.T) {
	n := &bind.NVRTC{Major: 13, Minor: 0}
	base := bind.Source{Name: "a.cu", Text: "x", Headers: map[string]string{"h.cuh": "y"}}
	k0 := CacheKey(n, base, []string{"--gpu-architecture=sm_90a"}, "cubin")
	variants := map[string]string{
		"source": CacheKey(n, bind.Source{Name: "a.cu", Text: "x2", Headers: base.Headers}, []string{"--gpu-architecture=sm_90a"}, "cubin"),
		"header": CacheKey(n, bind.Source{Name: "a.cu", Text: "x", Headers: map[string]string{"h.cuh": "y2"}}, []string{"--gpu-architecture=sm_90a"}, "cubin"),
		"arch":   CacheKey(n, base, []string{"--gpu-architecture=sm_80"}, "cubin"),
		"option": CacheKey(n, base, []string{"--gpu-architecture=sm_90a", "--fmad=false"}, "cubin"),
		"kind":   CacheKey(n, base, []string{"--gpu-architecture=sm_90a"}, "ptx"),
	}
	n2 := &bind.NVRTC{Major: 13, Minor: 1}
	variants["nvrtc version"] = CacheKey(n2, base, []string{"--gpu-architecture=sm_90a"}, "cubin")
	for what, k := range variants {
		if k == k0 {
			t.Errorf("changing the %s leaves the cache key unchanged", what)
		}
	}
	if again := CacheKey(n, base, []string{"--gpu-architecture=sm_90a"}, "cubin"); again != k0 {
		t.Error("the cache key is not deterministic")
	}
}
