package cuda

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// TestKDAPtxasInfo compiles kda.cu ($POTATO_PTXAS_FILE names another kernel file, e.g. norm.cu) with
// ptxas's verbose report (--ptxas-options=-v) and logs, per kernel, the registers, spill stores and
// loads, and stack frame: the NVRTC log that a successful build drops. It needs NVRTC only; the target is
// $POTATO_CUDA_ARCH, else sm_90.
func TestKDAPtxasInfo(t *testing.T) {
	nv, err := loadNVRTC()
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
		if s.name != file {
			continue
		}
		opts := append([]string{"--gpu-architecture=" + arch, "--ptxas-options=-v"}, nvrtcOptions...)
		log, err := compileLog(nv, s, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("NVRTC %d.%d, %s, ptxas report for %s:\n%s", nv.major, nv.minor, arch, s.name, log)
	}
}

// compileLog compiles k with opts and returns NVRTC's program log (build keeps it only on failure).
func compileLog(n *nvrtcLib, k kernelSource, opts []string) (string, error) {
	src, name := cString(k.src), cString(k.name)
	var keep [][]byte
	cstrs := func(ss []string) []uintptr {
		out := make([]uintptr, len(ss)+1)
		for i, s := range ss {
			b := cString(s)
			keep = append(keep, b)
			out[i] = uintptr(unsafe.Pointer(&b[0]))
		}
		return out
	}
	var hn, ht []string
	for h, txt := range k.headers {
		hn, ht = append(hn, h), append(ht, txt)
	}
	hdrs, incs, optp := cstrs(ht), cstrs(hn), cstrs(opts)
	var prog uintptr
	if err := n.check("nvrtcCreateProgram", ccall(n.createProgram, uintptr(unsafe.Pointer(&prog)), uintptr(unsafe.Pointer(&src[0])),
		uintptr(unsafe.Pointer(&name[0])), uintptr(len(hn)), uintptr(unsafe.Pointer(&hdrs[0])), uintptr(unsafe.Pointer(&incs[0])))); err != nil {
		return "", err
	}
	defer ccall(n.destroy, uintptr(unsafe.Pointer(&prog)))
	rc := ccall(n.compileProgram, prog, uintptr(len(opts)), uintptr(unsafe.Pointer(&optp[0])))
	runtime.KeepAlive(keep)
	runtime.KeepAlive(src)
	runtime.KeepAlive(name)
	runtime.KeepAlive(hdrs)
	runtime.KeepAlive(incs)
	runtime.KeepAlive(optp)
	log := n.log(prog)
	if err := n.check("nvrtcCompileProgram", rc); err != nil {
		return "", fmt.Errorf("%w\n%s", err, log)
	}
	return strings.TrimSpace(log), nil
}
