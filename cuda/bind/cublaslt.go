package bind

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// cuBLASLt, bound at run time like the driver (purego, no cgo): libcublasLt.so.13 is opened with dlopen
// and each entry point is called through Call, on the thread where the caller's CUDA context is current.
// What the backend does with it (a pinned algorithm per weight shape) is in cuda/cublaslt_plan.go.
//
// The values below are from cublasLt.h, cublas_api.h and library_types.h of CUDA 12.6
// (github.com/zspace/system.cuda-12.6, include/, CUBLAS_VERSION 12.6.4), and agree with the CUDA 13
// bindings in Modular's max/kernels/src/_cublas/cublaslt.mojo (which loads libcublasLt.so.13) and with a
// reading of a CUDA 13 wheel's cublasLt.h quoted in public notes (algo config attributes 0-8, preference
// attributes 0-12). The layouts of cublasLtMatmulAlgo_t (uint64_t data[8]) and
// cublasLtMatmulHeuristicResult_t (algo, size_t workspaceSize, cublasStatus_t state, float wavesCount,
// int reserved[4]: 96 bytes) are the same in both versions. Every call below ran on the H200 against
// libcublasLt 13.1.0 (cuda/records/JOURNAL.md, run 6).
const (
	// cublasStatus_t (cublas_api.h)
	LtSuccess      = 0
	LtNotSupported = 15 // CUBLAS_STATUS_NOT_SUPPORTED

	// cudaDataType_t (library_types.h)
	R32F  = 0
	R16BF = 14

	// cublasComputeType_t (cublas_api.h): float32 accumulation, float32 alpha/beta
	LtCompute32F = 68

	// cublasOperation_t (cublas_api.h)
	LtOpN = 0
	LtOpT = 1

	// cublasLtMatmulDescAttributes_t (int32_t values)
	LtDescTransA = 3
	LtDescTransB = 4

	// cublasLtMatmulPreferenceAttributes_t
	LtPrefMaxWorkspaceBytes     = 1 // uint64_t, default 0: no workspace
	LtPrefReductionSchemeMask   = 3 // uint32_t, default CUBLASLT_REDUCTION_SCHEME_MASK (all)
	LtPrefMinAlignmentABytes    = 5 // uint32_t, default 256
	LtPrefMinAlignmentBBytes    = 6
	LtPrefMinAlignmentCBytes    = 7
	LtPrefMinAlignmentDBytes    = 8
	LtReductionSchemeNone       = 0 // cublasLtReductionScheme_t: the dot product in one sequence
	LtReductionSchemeMaskAll    = 7
	LtAlgoConfigID              = 0 // cublasLtMatmulAlgoConfigAttributes_t: int32_t, read-only
	LtAlgoConfigTileID          = 1 // uint32_t, cublasLtMatmulTile_t
	LtAlgoConfigSplitKNum       = 2 // int32_t, default 1
	LtAlgoConfigReductionScheme = 3 // uint32_t, default CUBLASLT_REDUCTION_SCHEME_NONE
	LtAlgoConfigCTASwizzling    = 4 // uint32_t
	LtAlgoConfigCustomOption    = 5 // uint32_t
	LtAlgoConfigStagesID        = 6 // uint32_t, cublasLtMatmulStages_t
	LtAlgoConfigInnerShapeID    = 7 // uint16_t
	LtAlgoConfigClusterShapeID  = 8 // uint16_t, cublasLtClusterShape_t

	// cublasLtMatrixLayoutAttribute_t: a strided batch of matrices of one layout
	LtLayoutBatchCount         = 5 // int32_t, default 1
	LtLayoutStridedBatchOffset = 6 // int64_t, elements from one matrix of the batch to the next, default 0

	LtLibEnv     = "POTATO_CUBLASLT" // a path to libcublasLt, tried first
	ltDefaultLib = "libcublasLt.so.13"
)

// Algo is cublasLtMatmulAlgo_t: a semi-opaque, trivially copyable algorithm configuration.
type Algo struct{ Data [8]uint64 }

// HeuristicResult is cublasLtMatmulHeuristicResult_t.
type HeuristicResult struct {
	Algo      Algo
	Workspace uint64 // size_t workspaceSize
	State     int32  // cublasStatus_t
	Waves     float32
	reserved  [4]int32
}

// The C layouts above, checked at compile time: a wrong size is a build error, not a corrupted stack.
var (
	_ [64 - unsafe.Sizeof(Algo{})]byte
	_ [unsafe.Sizeof(Algo{}) - 64]byte
	_ [96 - unsafe.Sizeof(HeuristicResult{})]byte
	_ [unsafe.Sizeof(HeuristicResult{}) - 96]byte
)

// CuBLASLt holds libcublasLt's entry points, each named after its C function without the cublasLt prefix
// (cublasLtMatmulDescCreate is MatmulDescCreate) and called through Call; loaded once per process
// (LoadCuBLASLt), never changed after.
type CuBLASLt struct {
	Path    string // the library that was opened
	Version int    // cublasLtGetVersion, e.g. 130001

	Create, Destroy, getVersion, getStatusName, getStatusString uintptr
	MatmulDescCreate, MatmulDescDestroy, MatmulDescSetAttribute uintptr
	MatrixLayoutCreate, MatrixLayoutDestroy                     uintptr
	MatrixLayoutSetAttribute                                    uintptr
	PreferenceCreate, PreferenceDestroy, PreferenceSetAttribute uintptr
	MatmulAlgoGetHeuristic, MatmulAlgoCheck                     uintptr
	MatmulAlgoConfigGetAttribute, MatmulAlgoConfigSetAttribute  uintptr
	Matmul                                                      uintptr

	statusName, statusString func(int32) string // static C strings
	versionOf                func() uint64      // size_t
}

var (
	ltOnce sync.Once
	theLt  *CuBLASLt
	ltErr  error
)

// LoadCuBLASLt opens libcublasLt ($POTATO_CUBLASLT, then versions 13 and 12 where LoadNVRTC looks) once
// per process. The error wraps ErrUnavailable and lists where the
// library was looked for.
func LoadCuBLASLt() (*CuBLASLt, error) {
	ltOnce.Do(func() { theLt, ltErr = openCuBLASLt(ltCandidates()) })
	return theLt, ltErr
}

// ltCandidates lists where libcublasLt is looked for (toolkitCandidates): version 13 first (the toolkit
// of the driver this package is written for), then 12 (which a CUDA 13 driver runs as well; the values
// used here are the same).
func ltCandidates() []string { return toolkitCandidates(LtLibEnv, "libcublasLt", "cublas") }

func openCuBLASLt(candidates []string) (*CuBLASLt, error) {
	h, path, err := dlopenFirst("the cuBLASLt library ("+ltDefaultLib+"; set "+LtLibEnv+" to its path)", candidates)
	if err != nil {
		return nil, err
	}
	l := &CuBLASLt{Path: path}
	err = symbols(path, h, map[string]*uintptr{
		"cublasLtCreate":                       &l.Create,
		"cublasLtDestroy":                      &l.Destroy,
		"cublasLtGetVersion":                   &l.getVersion,
		"cublasLtGetStatusName":                &l.getStatusName,
		"cublasLtGetStatusString":              &l.getStatusString,
		"cublasLtMatmulDescCreate":             &l.MatmulDescCreate,
		"cublasLtMatmulDescDestroy":            &l.MatmulDescDestroy,
		"cublasLtMatmulDescSetAttribute":       &l.MatmulDescSetAttribute,
		"cublasLtMatrixLayoutCreate":           &l.MatrixLayoutCreate,
		"cublasLtMatrixLayoutDestroy":          &l.MatrixLayoutDestroy,
		"cublasLtMatrixLayoutSetAttribute":     &l.MatrixLayoutSetAttribute,
		"cublasLtMatmulPreferenceCreate":       &l.PreferenceCreate,
		"cublasLtMatmulPreferenceDestroy":      &l.PreferenceDestroy,
		"cublasLtMatmulPreferenceSetAttribute": &l.PreferenceSetAttribute,
		"cublasLtMatmulAlgoGetHeuristic":       &l.MatmulAlgoGetHeuristic,
		"cublasLtMatmulAlgoCheck":              &l.MatmulAlgoCheck,
		"cublasLtMatmulAlgoConfigGetAttribute": &l.MatmulAlgoConfigGetAttribute,
		"cublasLtMatmulAlgoConfigSetAttribute": &l.MatmulAlgoConfigSetAttribute,
		"cublasLtMatmul":                       &l.Matmul,
	})
	if err != nil {
		return nil, err
	}
	purego.RegisterFunc(&l.statusName, l.getStatusName)
	purego.RegisterFunc(&l.statusString, l.getStatusString)
	purego.RegisterFunc(&l.versionOf, l.getVersion)
	l.Version = int(l.versionOf())
	return l, nil
}

// Check turns a cublasStatus_t into nil or an *Error naming the call.
func (l *CuBLASLt) Check(name string, rc uintptr) error {
	if rc == LtSuccess {
		return nil
	}
	return &Error{Call: name, Code: int(rc), Name: l.statusName(int32(rc)), Text: l.statusString(int32(rc))}
}

// VersionString formats cublasLtGetVersion (major*10000 + minor*100 + patch).
func (l *CuBLASLt) VersionString() string {
	return fmt.Sprintf("%d.%d.%d", l.Version/10000, l.Version/100%100, l.Version%100)
}
