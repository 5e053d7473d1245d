package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// NVRTC, bound at run time like the driver: the kernels in kernels/*.cu are compiled at start for the
// device's architecture, and the machine code is cached on disk under a key that covers everything that
// can change it.

const (
	nvrtcEnv      = "POTATO_NVRTC"      // a path to libnvrtc, tried first
	cacheDirEnv   = "POTATO_CUDA_CACHE" // overrides the cache directory
	nvrtcSuccess  = 0
	cacheSubdir   = "potato-k3/cuda"
	cacheFileMode = 0o644
)

// nvrtcLib holds libnvrtc's entry points; loaded once per process, never changed after.
type nvrtcLib struct {
	path                                                   string
	major, minor                                           int
	version, createProgram, compileProgram, destroy        uintptr
	getLogSize, getLog, getCUBINSize, getCUBIN, getPTXSize uintptr
	getPTX, getErrorString                                 uintptr
	errorString                                            func(int32) string // nvrtcGetErrorString: a static C string
}

var (
	nvrtcOnce sync.Once
	theNVRTC  *nvrtcLib
	nvrtcErr  error
)

// nvrtcCandidates lists where libnvrtc is looked for (toolkitCandidates): version 13 first (the driver API
// this package is written for), then 12 (whose sm_90 machine code a CUDA 13 driver runs as well).
func nvrtcCandidates() []string { return toolkitCandidates(nvrtcEnv, "libnvrtc", "cuda_nvrtc") }

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

// loadNVRTC opens libnvrtc once per process.
func loadNVRTC() (*nvrtcLib, error) {
	nvrtcOnce.Do(func() { theNVRTC, nvrtcErr = openNVRTC() })
	return theNVRTC, nvrtcErr
}

func openNVRTC() (*nvrtcLib, error) {
	h, path, err := dlopenFirst("the NVRTC library (libnvrtc.so.13; set "+nvrtcEnv+" to its path)", nvrtcCandidates())
	if err != nil {
		return nil, err
	}
	// NVRTC opens its builtins library by name at the first compilation; when libnvrtc came from a
	// directory the loader does not search, load the builtins beside it now so that name resolves.
	if filepath.IsAbs(path) {
		builtins, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "libnvrtc-builtins.so.*"))
		sort.Strings(builtins)
		for _, bl := range builtins {
			if _, err := purego.Dlopen(bl, purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
				break
			}
		}
	}
	n := &nvrtcLib{path: path}
	err = symbols(path, h, map[string]*uintptr{
		"nvrtcVersion":           &n.version,
		"nvrtcCreateProgram":     &n.createProgram,
		"nvrtcCompileProgram":    &n.compileProgram,
		"nvrtcDestroyProgram":    &n.destroy,
		"nvrtcGetProgramLogSize": &n.getLogSize,
		"nvrtcGetProgramLog":     &n.getLog,
		"nvrtcGetCUBINSize":      &n.getCUBINSize,
		"nvrtcGetCUBIN":          &n.getCUBIN,
		"nvrtcGetPTXSize":        &n.getPTXSize,
		"nvrtcGetPTX":            &n.getPTX,
		"nvrtcGetErrorString":    &n.getErrorString,
	})
	if err != nil {
		return nil, err
	}
	purego.RegisterFunc(&n.errorString, n.getErrorString)
	var major, minor int32
	if err := n.check("nvrtcVersion", ccall(n.version, uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor)))); err != nil {
		return nil, err
	}
	n.major, n.minor = int(major), int(minor)
	return n, nil
}

func (n *nvrtcLib) check(name string, rc uintptr) error {
	if rc == nvrtcSuccess {
		return nil
	}
	return &Error{Call: name, Code: int(rc), Name: "NVRTC_ERROR", Text: n.errorString(int32(rc))}
}

// kernelSource is one .cu file to compile, with the headers it may include.
type kernelSource struct {
	name    string            // e.g. "matmul.cu"
	src     string            // the file's text
	headers map[string]string // include name -> text
}

// compileResult is one compiled module image and whether it came from the disk cache.
type compileResult struct {
	image  []byte // CUBIN (arch sm_XX) or PTX (arch compute_XX), NUL-terminated for PTX
	cached bool
	key    string // the cache key (hex SHA-256)
}

// cacheKey is the SHA-256 over everything that determines the compiled image: the source and its headers,
// the options (which include the architecture), the NVRTC version and the image kind.
func (n *nvrtcLib) cacheKey(k kernelSource, opts []string, kind string) string {
	h := sha256.New()
	fmt.Fprintf(h, "potato-k3 cuda kernel\x00%s\x00%d.%d\x00%s\x00", kind, n.major, n.minor, k.name)
	h.Write([]byte(k.src))
	names := make([]string, 0, len(k.headers))
	for name := range k.headers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(h, "\x00header %s\x00%s", name, k.headers[name])
	}
	for _, o := range opts {
		fmt.Fprintf(h, "\x00opt %s", o)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// cacheDir returns the kernel cache directory: $POTATO_CUDA_CACHE, else potato-k3/cuda under the user
// cache directory, else one under the system temporary directory.
func cacheDir() string {
	if d := os.Getenv(cacheDirEnv); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, cacheSubdir)
	}
	return filepath.Join(os.TempDir(), cacheSubdir)
}

// compile returns the image of k for arch (sm_XX[a] gives CUBIN, compute_XX gives PTX), from the cache
// dir when present there, else compiled with NVRTC and written to the cache (a failed cache write is not
// an error: the image is still good).
func (n *nvrtcLib) compile(k kernelSource, arch string, extra []string, dir string) (compileResult, error) {
	kind := "cubin"
	if strings.HasPrefix(arch, "compute_") {
		kind = "ptx"
	}
	opts := append([]string{"--gpu-architecture=" + arch}, extra...)
	key := n.cacheKey(k, opts, kind)
	file := filepath.Join(dir, key+"."+kind)
	if img, err := os.ReadFile(file); err == nil && len(img) > 0 {
		return compileResult{image: img, cached: true, key: key}, nil
	}
	img, err := n.build(k, opts, kind)
	if err != nil {
		return compileResult{}, err
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
	return compileResult{image: img, key: key}, nil
}

// build runs NVRTC on k with opts and returns the image of the given kind. A compilation error carries
// NVRTC's log.
func (n *nvrtcLib) build(k kernelSource, opts []string, kind string) (img []byte, err error) {
	src, name := cString(k.src), cString(k.name)
	hnames := make([]string, 0, len(k.headers))
	for h := range k.headers {
		hnames = append(hnames, h)
	}
	sort.Strings(hnames)
	keep := [][]byte{src, name}
	cstrs := func(ss []string) []uintptr {
		out := make([]uintptr, len(ss)+1) // +1: never an empty slice to take the address of
		for i, s := range ss {
			b := cString(s)
			keep = append(keep, b)
			out[i] = uintptr(unsafe.Pointer(&b[0]))
		}
		return out
	}
	htexts := make([]string, len(hnames))
	for i, h := range hnames {
		htexts[i] = k.headers[h]
	}
	hdrs, incs, optp := cstrs(htexts), cstrs(hnames), cstrs(opts)

	var prog uintptr
	rc := ccall(n.createProgram, uintptr(unsafe.Pointer(&prog)), uintptr(unsafe.Pointer(&src[0])), uintptr(unsafe.Pointer(&name[0])),
		uintptr(len(hnames)), uintptr(unsafe.Pointer(&hdrs[0])), uintptr(unsafe.Pointer(&incs[0])))
	if err := n.check("nvrtcCreateProgram("+k.name+")", rc); err != nil {
		return nil, err
	}
	defer func() {
		if derr := n.check("nvrtcDestroyProgram("+k.name+")", ccall(n.destroy, uintptr(unsafe.Pointer(&prog)))); derr != nil && err == nil {
			img, err = nil, derr
		}
	}()
	rc = ccall(n.compileProgram, prog, uintptr(len(opts)), uintptr(unsafe.Pointer(&optp[0])))
	runtime.KeepAlive(keep)
	runtime.KeepAlive(hdrs)
	runtime.KeepAlive(incs)
	runtime.KeepAlive(optp)
	if err := n.check("nvrtcCompileProgram("+k.name+")", rc); err != nil {
		return nil, fmt.Errorf("%w: %w\n%s", ErrCompile, err, n.log(prog))
	}
	sizeFn, getFn := n.getCUBINSize, n.getCUBIN
	if kind == "ptx" {
		sizeFn, getFn = n.getPTXSize, n.getPTX
	}
	var size uintptr
	if err := n.check("nvrtcGet"+strings.ToUpper(kind)+"Size("+k.name+")", ccall(sizeFn, prog, uintptr(unsafe.Pointer(&size)))); err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, fmt.Errorf("%w: NVRTC produced an empty %s for %s", ErrCompile, kind, k.name)
	}
	img = make([]byte, size)
	if err := n.check("nvrtcGet"+strings.ToUpper(kind)+"("+k.name+")", ccall(getFn, prog, uintptr(unsafe.Pointer(&img[0])))); err != nil {
		return nil, err
	}
	return img, nil
}

// log returns the program's compilation log.
func (n *nvrtcLib) log(prog uintptr) string {
	var size uintptr
	if ccall(n.getLogSize, prog, uintptr(unsafe.Pointer(&size))) != nvrtcSuccess || size <= 1 {
		return ""
	}
	b := make([]byte, size)
	if ccall(n.getLog, prog, uintptr(unsafe.Pointer(&b[0]))) != nvrtcSuccess {
		return ""
	}
	return strings.TrimRight(string(b), "\x00\n")
}

// ErrCompile marks a kernel that NVRTC could not compile (the message carries its log).
var ErrCompile = errors.New("cuda: kernel compilation failed")
