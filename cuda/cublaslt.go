package cuda

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// cuBLASLt, bound at run time like the driver (purego, no cgo): libcublasLt.so.13 is opened with dlopen
// and each entry point is called through ccall. Only the CUDA thread (executor.go) calls them, with the
// backend's context current. What the package does with it (a pinned algorithm per weight shape) is in
// cublaslt_plan.go.
//
// The values below are from cublasLt.h, cublas_api.h and library_types.h of CUDA 12.6
// (github.com/zspace/system.cuda-12.6, include/, CUBLAS_VERSION 12.6.4), and agree with the CUDA 13
// bindings in Modular's max/kernels/src/_cublas/cublaslt.mojo (which loads libcublasLt.so.13) and with a
// reading of a CUDA 13 wheel's cublasLt.h quoted in public notes (algo config attributes 0-8, preference
// attributes 0-12). The layouts of cublasLtMatmulAlgo_t (uint64_t data[8]) and
// cublasLtMatmulHeuristicResult_t (algo, size_t workspaceSize, cublasStatus_t state, float wavesCount,
// int reserved[4]: 96 bytes) are the same in both versions. Every call below ran on the H200 against
// libcublasLt 13.1.0 (NOTES.md, run 6).
const (
	// cublasStatus_t (cublas_api.h)
	cublasStatusSuccess  = 0
	ltStatusNotSupported = 15 // CUBLAS_STATUS_NOT_SUPPORTED

	// cudaDataType_t (library_types.h)
	cudaR32F  = 0
	cudaR16BF = 14

	// cublasComputeType_t (cublas_api.h): float32 accumulation, float32 alpha/beta
	cublasCompute32F = 68

	// cublasOperation_t (cublas_api.h)
	cublasOpN = 0
	cublasOpT = 1

	// cublasLtMatmulDescAttributes_t (int32_t values)
	ltDescTransA = 3
	ltDescTransB = 4

	// cublasLtMatmulPreferenceAttributes_t
	ltPrefMaxWorkspaceBytes     = 1 // uint64_t, default 0: no workspace
	ltPrefReductionSchemeMask   = 3 // uint32_t, default CUBLASLT_REDUCTION_SCHEME_MASK (all)
	ltPrefMinAlignmentABytes    = 5 // uint32_t, default 256
	ltPrefMinAlignmentBBytes    = 6
	ltPrefMinAlignmentCBytes    = 7
	ltPrefMinAlignmentDBytes    = 8
	ltReductionSchemeNone       = 0 // cublasLtReductionScheme_t: the dot product in one sequence
	ltReductionSchemeMaskAll    = 7
	ltAlgoConfigID              = 0 // cublasLtMatmulAlgoConfigAttributes_t: int32_t, read-only
	ltAlgoConfigTileID          = 1 // uint32_t, cublasLtMatmulTile_t
	ltAlgoConfigSplitKNum       = 2 // int32_t, default 1
	ltAlgoConfigReductionScheme = 3 // uint32_t, default CUBLASLT_REDUCTION_SCHEME_NONE
	ltAlgoConfigCTASwizzling    = 4 // uint32_t
	ltAlgoConfigCustomOption    = 5 // uint32_t
	ltAlgoConfigStagesID        = 6 // uint32_t, cublasLtMatmulStages_t
	ltAlgoConfigInnerShapeID    = 7 // uint16_t
	ltAlgoConfigClusterShapeID  = 8 // uint16_t, cublasLtClusterShape_t

	ltLibEnv     = "POTATO_CUBLASLT" // a path to libcublasLt, tried first
	ltDefaultLib = "libcublasLt.so.13"
)

// ltAlgo is cublasLtMatmulAlgo_t: a semi-opaque, trivially copyable algorithm configuration.
type ltAlgo struct{ data [8]uint64 }

// ltHeuristicResult is cublasLtMatmulHeuristicResult_t.
type ltHeuristicResult struct {
	algo      ltAlgo
	workspace uint64 // size_t workspaceSize
	state     int32  // cublasStatus_t
	waves     float32
	reserved  [4]int32
}

// The C layouts above, checked at compile time: a wrong size is a build error, not a corrupted stack.
var (
	_ [64 - unsafe.Sizeof(ltAlgo{})]byte
	_ [unsafe.Sizeof(ltAlgo{}) - 64]byte
	_ [96 - unsafe.Sizeof(ltHeuristicResult{})]byte
	_ [unsafe.Sizeof(ltHeuristicResult{}) - 96]byte
)

// ltLib holds libcublasLt's entry points; loaded once per process, never changed after.
type ltLib struct {
	path    string
	version int // cublasLtGetVersion, e.g. 130001

	create, destroy, getVersion, getStatusName, getStatusString uintptr
	descCreate, descDestroy, descSetAttribute                   uintptr
	layoutCreate, layoutDestroy                                 uintptr
	prefCreate, prefDestroy, prefSetAttribute                   uintptr
	algoGetHeuristic, algoCheck                                 uintptr
	algoConfigGetAttribute, algoConfigSetAttribute              uintptr
	matmul                                                      uintptr

	statusName, statusString func(int32) string // static C strings
	versionOf                func() uint64      // size_t
}

var (
	ltOnce sync.Once
	theLt  *ltLib
	ltErr  error
)

// loadCuBLASLt opens libcublasLt once per process. The error wraps ErrUnavailable and lists where the
// library was looked for.
func loadCuBLASLt() (*ltLib, error) {
	ltOnce.Do(func() { theLt, ltErr = openCuBLASLt(ltCandidates()) })
	return theLt, ltErr
}

// ltCandidates lists where libcublasLt is looked for (toolkitCandidates): version 13 first (the toolkit
// of the driver this package is written for), then 12 (which a CUDA 13 driver runs as well; the values
// used here are the same).
func ltCandidates() []string { return toolkitCandidates(ltLibEnv, "libcublasLt", "cublas") }

func openCuBLASLt(candidates []string) (*ltLib, error) {
	h, path, err := dlopenFirst("the cuBLASLt library ("+ltDefaultLib+"; set "+ltLibEnv+" to its path)", candidates)
	if err != nil {
		return nil, err
	}
	l := &ltLib{path: path}
	err = symbols(path, h, map[string]*uintptr{
		"cublasLtCreate":                       &l.create,
		"cublasLtDestroy":                      &l.destroy,
		"cublasLtGetVersion":                   &l.getVersion,
		"cublasLtGetStatusName":                &l.getStatusName,
		"cublasLtGetStatusString":              &l.getStatusString,
		"cublasLtMatmulDescCreate":             &l.descCreate,
		"cublasLtMatmulDescDestroy":            &l.descDestroy,
		"cublasLtMatmulDescSetAttribute":       &l.descSetAttribute,
		"cublasLtMatrixLayoutCreate":           &l.layoutCreate,
		"cublasLtMatrixLayoutDestroy":          &l.layoutDestroy,
		"cublasLtMatmulPreferenceCreate":       &l.prefCreate,
		"cublasLtMatmulPreferenceDestroy":      &l.prefDestroy,
		"cublasLtMatmulPreferenceSetAttribute": &l.prefSetAttribute,
		"cublasLtMatmulAlgoGetHeuristic":       &l.algoGetHeuristic,
		"cublasLtMatmulAlgoCheck":              &l.algoCheck,
		"cublasLtMatmulAlgoConfigGetAttribute": &l.algoConfigGetAttribute,
		"cublasLtMatmulAlgoConfigSetAttribute": &l.algoConfigSetAttribute,
		"cublasLtMatmul":                       &l.matmul,
	})
	if err != nil {
		return nil, err
	}
	purego.RegisterFunc(&l.statusName, l.getStatusName)
	purego.RegisterFunc(&l.statusString, l.getStatusString)
	purego.RegisterFunc(&l.versionOf, l.getVersion)
	l.version = int(l.versionOf())
	return l, nil
}

// check turns a cublasStatus_t into nil or an *Error naming the call.
func (l *ltLib) check(name string, rc uintptr) error {
	if rc == cublasStatusSuccess {
		return nil
	}
	return &Error{Call: name, Code: int(rc), Name: l.statusName(int32(rc)), Text: l.statusString(int32(rc))}
}

// versionString formats cublasLtGetVersion (major*10000 + minor*100 + patch).
func (l *ltLib) versionString() string {
	return fmt.Sprintf("%d.%d.%d", l.version/10000, l.version/100%100, l.version%100)
}

// ltHandle is a cuBLASLt handle with the one matmul descriptor the backend uses: D = op(A) op(B) with
// A^T (the weight, k x m column-major = m x k row-major), float32 accumulation and float32 alpha, beta.
type ltHandle struct {
	lib    *ltLib
	handle uintptr // cublasLtHandle_t
	desc   uintptr // cublasLtMatmulDesc_t
	ws     uint64  // device workspace of ltWorkspaceAlloc bytes (cuMemAlloc, freed by the backend's release)
	shapes map[ltKey]*ltShape
}

// newLtHandle creates the handle and the matmul descriptor (on the CUDA thread, context current).
func newLtHandle(l *ltLib) (*ltHandle, error) {
	h := &ltHandle{lib: l, shapes: map[ltKey]*ltShape{}}
	if err := l.check("cublasLtCreate", ccall(l.create, uintptr(unsafe.Pointer(&h.handle)))); err != nil {
		return nil, err
	}
	if err := l.check("cublasLtMatmulDescCreate", ccall(l.descCreate, uintptr(unsafe.Pointer(&h.desc)), cublasCompute32F, cudaR32F)); err != nil {
		return nil, errors.Join(err, h.close())
	}
	for _, a := range []struct {
		name string
		attr uintptr
		v    int32
	}{{"TRANSA", ltDescTransA, cublasOpT}, {"TRANSB", ltDescTransB, cublasOpN}} {
		v := a.v
		if err := l.check("cublasLtMatmulDescSetAttribute("+a.name+")", ccall(l.descSetAttribute, h.desc, a.attr, uintptr(unsafe.Pointer(&v)), 4)); err != nil {
			return nil, errors.Join(err, h.close())
		}
	}
	return h, nil
}

// close destroys the layouts of every planned shape, the descriptor and the handle.
func (h *ltHandle) close() error {
	l := h.lib
	var errs []error
	for _, s := range h.shapes {
		if s.adesc != 0 {
			errs = append(errs, l.check("cublasLtMatrixLayoutDestroy", ccall(l.layoutDestroy, s.adesc)))
			s.adesc = 0
		}
	}
	if h.desc != 0 {
		errs = append(errs, l.check("cublasLtMatmulDescDestroy", ccall(l.descDestroy, h.desc)))
		h.desc = 0
	}
	if h.handle != 0 {
		errs = append(errs, l.check("cublasLtDestroy", ccall(l.destroy, h.handle)))
		h.handle = 0
	}
	return errors.Join(errs...)
}

// layout creates a column-major matrix layout of rows x cols elements of type dt, leading dimension ld.
func (h *ltHandle) layout(dt uintptr, rows, cols, ld int) (uintptr, error) {
	var p uintptr
	err := h.lib.check(fmt.Sprintf("cublasLtMatrixLayoutCreate(%dx%d, ld %d)", rows, cols, ld),
		ccall(h.lib.layoutCreate, uintptr(unsafe.Pointer(&p)), dt, uintptr(rows), uintptr(cols), uintptr(ld)))
	return p, err
}

// dropLayout destroys a layout (0 is a no-op).
func (h *ltHandle) dropLayout(p uintptr) error {
	if p == 0 {
		return nil
	}
	return h.lib.check("cublasLtMatrixLayoutDestroy", ccall(h.lib.layoutDestroy, p))
}

// configGet reads an algo configuration attribute of size bytes into v (a pointer to a value of that size).
func (h *ltHandle) configGet(a *ltAlgo, attr uintptr, v unsafe.Pointer, size uintptr) error {
	var written uintptr
	return h.lib.check(fmt.Sprintf("cublasLtMatmulAlgoConfigGetAttribute(%d)", attr),
		ccall(h.lib.algoConfigGetAttribute, uintptr(unsafe.Pointer(a)), attr, uintptr(v), size, uintptr(unsafe.Pointer(&written))))
}

// configSet writes an algo configuration attribute.
func (h *ltHandle) configSet(a *ltAlgo, attr uintptr, v unsafe.Pointer, size uintptr) error {
	return h.lib.check(fmt.Sprintf("cublasLtMatmulAlgoConfigSetAttribute(%d)", attr),
		ccall(h.lib.algoConfigSetAttribute, uintptr(unsafe.Pointer(a)), attr, uintptr(v), size))
}
