package device

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// The kernel cache: NVRTC images on disk under a key that covers everything that can change them, so a
// second start loads them in milliseconds.

const (
	// CacheDirEnv overrides the kernel cache directory.
	CacheDirEnv = "POTATO_CUDA_CACHE"
	cacheSubdir = "potato-k3/cuda"
)

// Image is one compiled module image and whether it came from the disk cache.
type Image struct {
	Data   []byte // CUBIN (arch sm_XX) or PTX (arch compute_XX)
	Cached bool
	Key    string // the cache key (hex SHA-256)
}

// CacheKey is the SHA-256 over everything that determines the compiled image: the source and its
// headers, the options (which include the architecture), the NVRTC version and the image kind.
func CacheKey(nv *bind.NVRTC, k bind.Source, opts []string, kind string) string {
	h := sha256.New()
	fmt.Fprintf(h, "potato-k3 cuda kernel\x00%s\x00%d.%d\x00%s\x00", kind, nv.Major, nv.Minor, k.Name)
	h.Write([]byte(k.Text))
	names := make([]string, 0, len(k.Headers))
	for name := range k.Headers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(h, "\x00header %s\x00%s", name, k.Headers[name])
	}
	for _, o := range opts {
		fmt.Fprintf(h, "\x00opt %s", o)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// CacheDir returns the kernel cache directory: $POTATO_CUDA_CACHE, else potato-k3/cuda under the user
// cache directory, else one under the system temporary directory.
func CacheDir() string {
	if d := os.Getenv(CacheDirEnv); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, cacheSubdir)
	}
	return filepath.Join(os.TempDir(), cacheSubdir)
}

// Compile returns the image of k for arch (sm_XX[a] gives CUBIN, compute_XX gives PTX) compiled with the
// options extra, from dir when present there, else built with NVRTC and written to dir (a failed cache
// write is not an error: the image is still good).
func Compile(nv *bind.NVRTC, k bind.Source, arch string, extra []string, dir string) (Image, error) {
	kind := bind.ImageKind(arch)
	opts := append([]string{"--gpu-architecture=" + arch}, extra...)
	key := CacheKey(nv, k, opts, kind)
	file := filepath.Join(dir, key+"."+kind)
	if img, err := os.ReadFile(file); err == nil && len(img) > 0 {
		return Image{Data: img, Cached: true, Key: key}, nil
	}
	img, err := nv.Build(k, opts, kind)
	if err != nil {
		return Image{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err == nil {
		if tmp, err := os.CreateTemp(dir, ".tmp-"+key+"-*"); err == nil {
			_, werr := tmp.Write(img)
			cerr := tmp.Close()
			if werr == nil && cerr == nil {
				_ = os.Rename(tmp.Name(), file) // atomic: readers see the whole file or none
			} else {
				_ = os.Remove(tmp.Name())
			}
		}
	}
	return Image{Data: img, Key: key}, nil
}

// CompileAll compiles (or reads from the cache in dir) every source for arch with the options extra, in
// parallel, and returns the images by source name and how many came from the cache. A panic inside
// NVRTC's binding becomes an error wrapping ErrInternal.
func CompileAll(nv *bind.NVRTC, srcs []bind.Source, arch string, extra []string, dir string) (map[string][]byte, int, error) {
	res := make([]Image, len(srcs))
	errs := make([]error, len(srcs))
	var wg sync.WaitGroup
	for i := range srcs {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					errs[i] = fmt.Errorf("%w: compiling %s: panic: %v", ErrInternal, srcs[i].Name, p)
				}
			}()
			res[i], errs[i] = Compile(nv, srcs[i], arch, extra, dir)
		})
	}
	wg.Wait()
	images := map[string][]byte{}
	cached := 0
	for i, s := range srcs {
		if errs[i] != nil {
			return nil, 0, fmt.Errorf("cuda: kernels for %s: %w", arch, errs[i])
		}
		images[s.Name] = res[i].Data
		if res[i].Cached {
			cached++
		}
	}
	return images, cached, nil
}
