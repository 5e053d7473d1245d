package bind

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// NVRTC, bound at run time like the driver: Build compiles one CUDA C++ source for an architecture into
// CUBIN or PTX. Where the images are cached is the caller's business (cuda/device's kernel cache).

const (
	nvrtcEnv     = "POTATO_NVRTC" // a path to libnvrtc, tried first
	nvrtcSuccess = 0
)

// NVRTC holds libnvrtc's entry points; loaded once per process (LoadNVRTC), never changed after.
type NVRTC struct {
	Path         string // the library that was opened
	Major, Minor int    // nvrtcVersion

	version, createProgram, compileProgram, destroy        uintptr
	getLogSize, getLog, getCUBINSize, getCUBIN, getPTXSize uintptr
	getPTX, getErrorString                                 uintptr
	errorString                                            func(int32) string // nvrtcGetErrorString: a static C string
}

// Source is one CUDA C++ file to compile, with the headers it may include.
type Source struct {
	Name    string            // e.g. "matmul.cu"
	Text    string            // the file's text
	Headers map[string]string // include name -> text
}

var (
	nvrtcOnce sync.Once
	theNVRTC  *NVRTC
	nvrtcErr  error
)

// nvrtcCandidates lists where libnvrtc is looked for (toolkitCandidates): version 13 first (the driver API
// these bindings are written for), then 12 (whose sm_90 machine code a CUDA 13 driver runs as well).
func nvrtcCandidates() []string { return toolkitCandidates(nvrtcEnv, "libnvrtc", "cuda_nvrtc") }

// LoadNVRTC opens libnvrtc ($POTATO_NVRTC, then versions 13 and 12 on the loader's path, in the toolkit's
// homes and in NVIDIA's Python wheels) once per process. The error wraps ErrUnavailable.
func LoadNVRTC() (*NVRTC, error) {
	nvrtcOnce.Do(func() { theNVRTC, nvrtcErr = openNVRTC() })
	return theNVRTC, nvrtcErr
}

func openNVRTC() (*NVRTC, error) {
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
	n := &NVRTC{Path: path}
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
	if err := n.check("nvrtcVersion", Call(n.version, uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor)))); err != nil {
		return nil, err
	}
	n.Major, n.Minor = int(major), int(minor)
	return n, nil
}

func (n *NVRTC) check(name string, rc uintptr) error {
	if rc == nvrtcSuccess {
		return nil
	}
	return &Error{Call: name, Code: int(rc), Name: "NVRTC_ERROR", Text: n.errorString(int32(rc))}
}

// ImageKind is the kind of image Build makes for arch: "ptx" for a virtual architecture (compute_XX),
// else "cubin" (sm_XX, sm_XXa).
func ImageKind(arch string) string {
	if strings.HasPrefix(arch, "compute_") {
		return "ptx"
	}
	return "cubin"
}

// program is a created NVRTC program and the C strings it was created from.
type program struct {
	n    *NVRTC
	prog uintptr
	keep [][]byte
	ptrs [][]uintptr
}

// newProgram creates the NVRTC program of k (headers in name order).
func (n *NVRTC) newProgram(k Source) (*program, error) {
	p := &program{n: n}
	src, name := CString(k.Text), CString(k.Name)
	p.keep = append(p.keep, src, name)
	hnames := make([]string, 0, len(k.Headers))
	for h := range k.Headers {
		hnames = append(hnames, h)
	}
	sort.Strings(hnames)
	htexts := make([]string, len(hnames))
	for i, h := range hnames {
		htexts[i] = k.Headers[h]
	}
	hdrs, incs := p.cstrs(htexts), p.cstrs(hnames)
	rc := Call(n.createProgram, uintptr(unsafe.Pointer(&p.prog)), uintptr(unsafe.Pointer(&src[0])), uintptr(unsafe.Pointer(&name[0])),
		uintptr(len(hnames)), uintptr(unsafe.Pointer(&hdrs[0])), uintptr(unsafe.Pointer(&incs[0])))
	runtime.KeepAlive(p)
	if err := n.check("nvrtcCreateProgram("+k.Name+")", rc); err != nil {
		return nil, err
	}
	return p, nil
}

// cstrs returns C strings of ss as an array of pointers (one more, never empty), kept alive with p.
func (p *program) cstrs(ss []string) []uintptr {
	out := make([]uintptr, len(ss)+1)
	for i, s := range ss {
		b := CString(s)
		p.keep = append(p.keep, b)
		out[i] = uintptr(unsafe.Pointer(&b[0]))
	}
	p.ptrs = append(p.ptrs, out)
	return out
}

// compile runs nvrtcCompileProgram with opts and returns its result code.
func (p *program) compile(opts []string) uintptr {
	optp := p.cstrs(opts)
	rc := Call(p.n.compileProgram, p.prog, uintptr(len(opts)), uintptr(unsafe.Pointer(&optp[0])))
	runtime.KeepAlive(p)
	return rc
}

// destroy releases the program.
func (p *program) destroy(what string) error {
	return p.n.check("nvrtcDestroyProgram("+what+")", Call(p.n.destroy, uintptr(unsafe.Pointer(&p.prog))))
}

// log returns the program's compilation log.
func (p *program) log() string {
	var size uintptr
	if Call(p.n.getLogSize, p.prog, uintptr(unsafe.Pointer(&size))) != nvrtcSuccess || size <= 1 {
		return ""
	}
	b := make([]byte, size)
	if Call(p.n.getLog, p.prog, uintptr(unsafe.Pointer(&b[0]))) != nvrtcSuccess {
		return ""
	}
	return strings.TrimRight(string(b), "\x00\n")
}

// Build compiles k with opts (which name the architecture: --gpu-architecture=...) and returns the image
// of kind ("cubin" or "ptx", ImageKind). A compilation error wraps ErrCompile and carries NVRTC's log.
func (n *NVRTC) Build(k Source, opts []string, kind string) (img []byte, err error) {
	p, err := n.newProgram(k)
	if err != nil {
		return nil, err
	}
	defer func() {
		if derr := p.destroy(k.Name); derr != nil && err == nil {
			img, err = nil, derr
		}
	}()
	if err := n.check("nvrtcCompileProgram("+k.Name+")", p.compile(opts)); err != nil {
		return nil, fmt.Errorf("%w: %w\n%s", ErrCompile, err, p.log())
	}
	sizeFn, getFn := n.getCUBINSize, n.getCUBIN
	if kind == "ptx" {
		sizeFn, getFn = n.getPTXSize, n.getPTX
	}
	var size uintptr
	if err := n.check("nvrtcGet"+strings.ToUpper(kind)+"Size("+k.Name+")", Call(sizeFn, p.prog, uintptr(unsafe.Pointer(&size)))); err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, fmt.Errorf("%w: NVRTC produced an empty %s for %s", ErrCompile, kind, k.Name)
	}
	img = make([]byte, size)
	if err := n.check("nvrtcGet"+strings.ToUpper(kind)+"("+k.Name+")", Call(getFn, p.prog, uintptr(unsafe.Pointer(&img[0])))); err != nil {
		return nil, err
	}
	return img, nil
}

// BuildLog compiles k with opts and returns NVRTC's program log, which Build keeps only on failure (with
// --ptxas-options=-v it holds each kernel's registers and spills).
func (n *NVRTC) BuildLog(k Source, opts []string) (string, error) {
	p, err := n.newProgram(k)
	if err != nil {
		return "", err
	}
	defer p.destroy(k.Name)
	rc := p.compile(opts)
	log := p.log()
	if err := n.check("nvrtcCompileProgram("+k.Name+")", rc); err != nil {
		return "", fmt.Errorf("%w: %w\n%s", ErrCompile, err, log)
	}
	return strings.TrimSpace(log), nil
}
