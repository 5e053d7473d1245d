package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// The dense bfloat16 matmuls of BF16 precision on cuBLASLt, batch invariant by construction and by test.
//
// cuBLASLt's heuristic picks a kernel, a tile, a split of k and a reduction scheme per problem size, so
// left to itself a row's sum would depend on the number of rows. Here the algorithm is chosen once per
// weight shape (m, k), at a fixed representative n, and then used for every n:
//
//   - at most ltMaxWorkspace bytes of workspace and the reduction scheme mask NONE: a split of k across
//     blocks (split-K with any reduction, stream-K style schedules) keeps partial sums of at least one
//     tile in the workspace, and the smallest tile's (8 x 8 float32) is 256 bytes, so none fits; the
//     few bytes allowed are the counters Hopper's kernels ask for (4 bytes on the H200 at large n);
//   - the chosen configuration is read back and forced to CUBLASLT_ALGO_CONFIG_SPLITK_NUM 1 and
//     CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME NONE: each output element is one block's float32 accumulator
//     over k in the kernel's fixed order, whatever n, the tile the row falls in or the grid;
//   - cublasLtMatmulAlgoCheck must accept it, within that workspace, at every n of ltProbeN and at the largest
//     n of one call (ltCallRows); else the shape never uses cuBLASLt (a choice by shape, never by n: a
//     per-n fallback to the project's kernel would give a row other bits in another wave).
//
// One cublasLtMatmul call covers at most ltCallRows(m, k) rows, so that none of its operands holds more
// than 2^31-1 elements: tensors may hold up to 2^34 (maxElements), and gemmLt runs a larger n as calls
// of whole row blocks. The plan's checks then cover every call as they did when a tensor held at most
// 2^31-1 elements, and since each row's sum is the pinned algorithm's whatever n and the row's place
// (the invariance below), splitting changes no bit.
//
// TestCuBLASLtBatchInvariance checks the result on the H200: a block of rows alone and inside waves of
// 64 to 20,000 rows at several offsets, bit for bit, at K3's shapes.

// ltRepN is the number of rows the heuristic is asked about; ltProbeN are the row counts the pinned
// algorithm must be valid for (with the largest n of the shape, added per shape).
const ltRepN = 4096

var ltProbeN = []int{1, 7, 64, 65, 300, 4096, 65536}

// ltMaxWorkspace is the most workspace a pinned algorithm may use, in bytes: room for counters, not for
// one tile of partial sums. ltWorkspaceAlloc is the size of the buffer passed (one allocation granule).
const (
	ltMaxWorkspace   = 64
	ltWorkspaceAlloc = 256
)

// ltAlign is the alignment in bytes the pinned algorithm may assume of every operand's address.
const ltAlign = 16

// ltHeuristicCount is how many configurations the heuristic is asked for; the first that passes every
// check is pinned.
const ltHeuristicCount = 16

// ltKey is a weight shape: m output columns (weight rows), k inner size, and the output's type
// (bind.R32F: float32, the dense matmuls', rounded by the caller; bind.R16BF: bfloat16, rounded to
// nearest even by cuBLASLt's epilogue, the routed experts').
type ltKey struct {
	m, k int
	out  uintptr
}

// ltShape is the plan of one weight shape: the pinned algorithm, or why the shape stays on the project's
// tensor-core kernel.
type ltShape struct {
	ok     bool
	algo   bind.Algo
	adesc  uintptr // the weight's layout: bf16, k x m column-major, ld k
	ldb    int     // leading dimension of the bf16 copy of x: k rounded up to 8 (16-byte rows)
	config ltConfig
	out    uintptr     // the output's type: bind.R32F or bind.R16BF
	why    string      // when !ok: the reason
	tuned  bool        // ltTune ran (cublaslt_tune.go): algo is the fastest valid configuration
	batch  *ltBatching // a strided batch of matrices a call (cublaslt_batch.go); nil: one
}

// outBytes is the size of one output element.
func (s *ltShape) outBytes() int {
	if s.out == bind.R16BF {
		return 2
	}
	return 4
}

// ltConfig is the pinned algorithm's configuration as cuBLASLt reports it (for logs and cuda/records/JOURNAL.md).
type ltConfig struct {
	ID, SplitK                               int32
	Tile, Reduction, Swizzle, Custom, Stages uint32
	InnerShape, ClusterShape                 uint16
	Waves                                    float32
	Candidates, Index                        int    // heuristic results, and the one pinned
	ReductionMask                            bool   // the heuristic was filtered by the NONE mask
	ProbeN                                   []int  // the row counts it was checked at
	Workspace                                uint64 // the most workspace AlgoCheck asked for over them
	Tuned                                    string // how ltTune chose it (empty: the heuristic's first)
}

func (c ltConfig) String() string {
	return fmt.Sprintf("algo %d, tile id %d, stages id %d, split-K %d, reduction %d, swizzle %d, custom %d, inner shape %d, cluster shape %d, waves %.2f at n=%d (result %d of %d, reduction mask NONE %v), valid at n=%v with %d bytes of workspace",
		c.ID, c.Tile, c.Stages, c.SplitK, c.Reduction, c.Swizzle, c.Custom, c.InnerShape, c.ClusterShape, c.Waves, ltRepN, c.Index+1, c.Candidates, c.ReductionMask, c.ProbeN, c.Workspace) + c.tunedNote()
}

// tunedNote is ", tuned: <how>" for a tuned configuration, else empty.
func (c ltConfig) tunedNote() string {
	if c.Tuned == "" {
		return ""
	}
	return ", tuned: " + c.Tuned
}

// shape returns the plan for weight shape (m, k) with a float32 output, making it on first use. An
// error is a failed cuBLASLt call; a shape no algorithm fits comes back with ok false and the reason.
func (h *ltHandle) shape(m, k int) (*ltShape, error) { return h.shapeOut(m, k, bind.R32F) }

// shapeOut is shape with the output's type out (bind.R32F or bind.R16BF).
func (h *ltHandle) shapeOut(m, k int, out uintptr) (*ltShape, error) {
	key := ltKey{m, k, out}
	if s, ok := h.shapes[key]; ok {
		return s, nil
	}
	s, err := h.plan(m, k, out)
	if err != nil {
		return nil, fmt.Errorf("cuBLASLt plan for a %dx%d weight: %w", m, k, err)
	}
	h.shapes[key] = s
	return s, nil
}

// ioLayouts creates the layouts of x (bf16, k x n, ld ldb) and of s's output (m x n, ld m; for a batched
// shape ld ldd, both layouts a batch of the plan's count with contiguous outputs: cublaslt_batch.go).
func (h *ltHandle) ioLayouts(s *ltShape, m, k, n int) (bdesc, ddesc uintptr, err error) {
	if s.batch != nil {
		return h.batchIO(s, m, k, n, s.batch.count, int64(n)*int64(s.batch.ldd))
	}
	if bdesc, err = h.layout(bind.R16BF, k, n, s.ldb); err != nil {
		return 0, 0, err
	}
	if ddesc, err = h.layout(s.out, m, n, m); err != nil {
		return 0, 0, errors.Join(err, h.dropLayout(bdesc))
	}
	return bdesc, ddesc, nil
}

// plan asks the heuristic for configurations at n = ltRepN and pins the first that passes the checks
// above.
func (h *ltHandle) plan(m, k int, out uintptr) (*ltShape, error) {
	s := &ltShape{ldb: (k + 7) &^ 7, out: out}
	if n := ltCallRows(m, k); n < 4 || (out == bind.R16BF && m%2 != 0) {
		s.why = fmt.Sprintf("one call holds at most %d rows of %d outputs: the outputs of the next calls would not start 16-byte aligned", n, m)
		return s, nil
	}
	var err error
	if s.adesc, err = h.layout(bind.R16BF, k, m, k); err != nil {
		return nil, err
	}
	return h.pinFirst(s, m, k, ltProbes(m, k))
}

// pinFirst pins the first of the heuristic's configurations for s (its weight layout made) at n = ltRepN
// that passes pin's checks at the probes; none passing leaves s.ok false with the reason.
func (h *ltHandle) pinFirst(s *ltShape, m, k int, probes []int) (*ltShape, error) {
	results, masked, err := h.heuristic(s, m, k, ltMaxWorkspace)
	if err != nil {
		return nil, errors.Join(err, h.dropLayout(s.adesc))
	}
	s.why = fmt.Sprintf("the heuristic returned no configuration at n=%d", ltRepN)
	for i := range results {
		r := &results[i]
		if r.State != bind.LtSuccess {
			continue
		}
		cfg, why, err := h.pin(s, &r.Algo, m, k, probes)
		if err != nil {
			return nil, errors.Join(err, h.dropLayout(s.adesc))
		}
		if why != "" {
			s.why = fmt.Sprintf("result %d of %d: %s", i+1, len(results), why)
			continue
		}
		cfg.Waves, cfg.Candidates, cfg.Index, cfg.ReductionMask, cfg.ProbeN = r.Waves, len(results), i, masked, probes
		s.ok, s.algo, s.config, s.why = true, r.Algo, cfg, ""
		return s, nil
	}
	return s, nil
}

// ltMaxCallElements bounds each operand of one cublasLtMatmul call: the range the pinned algorithms are
// checked for (the bound tensors had before they could hold 2^34 elements).
const ltMaxCallElements = math.MaxInt32

// ltCallRows is the most rows of one cublasLtMatmul call for weight shape (m, k): x (n x k, padded to
// ldb <= k + 7 as bfloat16) and out (n x m) within ltMaxCallElements, rounded down to a multiple of 4
// when it is 4 or more, so that the output of every call after the first starts 16-byte aligned
// (4 rows of m float32 are 16m bytes).
func ltCallRows(m, k int) int {
	n := ltMaxCallElements / max(m, (k+7)&^7)
	if n >= 4 {
		n &^= 3
	}
	return n
}

// ltProbes returns ltProbeN up to the largest n of one call (ltCallRows), and that n.
func ltProbes(m, k int) []int {
	nMax := ltCallRows(m, k)
	var out []int
	for _, n := range ltProbeN {
		if n < nMax {
			out = append(out, n)
		}
	}
	return append(out, nMax)
}

// heuristic returns the heuristic's configurations at n = ltRepN allowing ws bytes of workspace
// (ltMaxWorkspace in plan), filtered by the reduction scheme mask NONE (masked true) or, if the library refuses that filter
// or it leaves nothing, unfiltered (pin checks each result either way).
func (h *ltHandle) heuristic(s *ltShape, m, k int, ws uint64) (res []bind.HeuristicResult, masked bool, err error) {
	return h.heuristicAt(s, m, k, ws, ltRepN)
}

// heuristicAt is heuristic asked about n rows (ltTune asks at several).
func (h *ltHandle) heuristicAt(s *ltShape, m, k int, ws uint64, n int) (res []bind.HeuristicResult, masked bool, err error) {
	bdesc, ddesc, err := h.ioLayouts(s, m, k, n)
	if err != nil {
		return nil, false, err
	}
	defer func() { err = errors.Join(err, h.dropLayout(bdesc), h.dropLayout(ddesc)) }()
	var firstErr error
	for _, mask := range []uint32{bind.LtReductionSchemeNone, bind.LtReductionSchemeMaskAll} {
		out, err := h.heuristicWith(s.adesc, bdesc, ddesc, ws, mask)
		if err != nil && mask == bind.LtReductionSchemeNone {
			firstErr = err // the filter refused: try without it
			continue
		}
		if err != nil {
			return nil, false, errors.Join(firstErr, err)
		}
		if len(out) > 0 {
			return out, mask == bind.LtReductionSchemeNone, nil
		}
	}
	return nil, false, nil
}

// heuristicWith runs cublasLtMatmulAlgoGetHeuristic with one preference: ws bytes of workspace at most,
// reduction scheme mask, operands 16-byte aligned.
func (h *ltHandle) heuristicWith(adesc, bdesc, ddesc uintptr, ws uint64, mask uint32) ([]bind.HeuristicResult, error) {
	l := h.lib
	var pref uintptr
	if err := l.Check("cublasLtMatmulPreferenceCreate", bind.Call(l.PreferenceCreate, uintptr(unsafe.Pointer(&pref)))); err != nil {
		return nil, err
	}
	// 16 bytes: the operands are pool allocations (256-byte aligned), but an algorithm that needs no more
	// than 16 stays valid for any buffer gemmLt accepts (it checks 16)
	align := uint32(ltAlign)
	err := errors.Join(
		l.Check("cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)", bind.Call(l.PreferenceSetAttribute, pref, bind.LtPrefMaxWorkspaceBytes, uintptr(unsafe.Pointer(&ws)), 8)),
		l.Check("cublasLtMatmulPreferenceSetAttribute(REDUCTION_SCHEME_MASK)", bind.Call(l.PreferenceSetAttribute, pref, bind.LtPrefReductionSchemeMask, uintptr(unsafe.Pointer(&mask)), 4)))
	for _, a := range []uintptr{bind.LtPrefMinAlignmentABytes, bind.LtPrefMinAlignmentBBytes, bind.LtPrefMinAlignmentCBytes, bind.LtPrefMinAlignmentDBytes} {
		err = errors.Join(err, l.Check("cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)", bind.Call(l.PreferenceSetAttribute, pref, a, uintptr(unsafe.Pointer(&align)), 4)))
	}
	out := make([]bind.HeuristicResult, ltHeuristicCount)
	var count int32
	if err == nil {
		rc := bind.Call(l.MatmulAlgoGetHeuristic, h.handle, h.desc, adesc, bdesc, ddesc, ddesc, pref, ltHeuristicCount,
			uintptr(unsafe.Pointer(&out[0])), uintptr(unsafe.Pointer(&count)))
		if rc != bind.LtSuccess && rc != bind.LtNotSupported { // NOT_SUPPORTED: no configuration
			err = l.Check("cublasLtMatmulAlgoGetHeuristic", rc)
		}
	}
	runtime.KeepAlive(out)
	if err := errors.Join(err, l.Check("cublasLtMatmulPreferenceDestroy", bind.Call(l.PreferenceDestroy, pref))); err != nil {
		return nil, err
	}
	return out[:max(count, 0)], nil
}

// pin forces split-K 1 and no reduction on algo, reads its configuration back, and checks it at every
// probe n, with at most ltMaxWorkspace bytes of workspace. why is empty when the algorithm passes; err is a failed layout call (a
// refused configuration call only rejects this algorithm).
func (h *ltHandle) pin(s *ltShape, algo *bind.Algo, m, k int, probes []int) (cfg ltConfig, why string, err error) {
	one, none := int32(1), uint32(bind.LtReductionSchemeNone)
	if err := errors.Join(h.configSet(algo, bind.LtAlgoConfigSplitKNum, unsafe.Pointer(&one), 4),
		h.configSet(algo, bind.LtAlgoConfigReductionScheme, unsafe.Pointer(&none), 4)); err != nil {
		return cfg, fmt.Sprintf("forcing split-K 1 and no reduction: %v", err), nil
	}
	cfg, err = h.describe(algo)
	switch {
	case err != nil:
		return cfg, fmt.Sprintf("reading its split-K and reduction scheme: %v", err), nil
	case cfg.SplitK != 1 || cfg.Reduction != bind.LtReductionSchemeNone:
		return cfg, fmt.Sprintf("split-K %d, reduction scheme %d after forcing 1 and NONE", cfg.SplitK, cfg.Reduction), nil
	}
	for _, n := range probes {
		bdesc, ddesc, err := h.ioLayouts(s, m, k, n)
		if err != nil {
			return cfg, "", err
		}
		var r bind.HeuristicResult
		rc := bind.Call(h.lib.MatmulAlgoCheck, h.handle, h.desc, s.adesc, bdesc, ddesc, ddesc, uintptr(unsafe.Pointer(algo)), uintptr(unsafe.Pointer(&r)))
		if err := errors.Join(h.dropLayout(bdesc), h.dropLayout(ddesc)); err != nil {
			return cfg, "", err
		}
		switch {
		case rc != bind.LtSuccess:
			return cfg, fmt.Sprintf("cublasLtMatmulAlgoCheck at n=%d: %v", n, h.lib.Check("cublasLtMatmulAlgoCheck", rc)), nil
		case r.Workspace > ltMaxWorkspace:
			return cfg, fmt.Sprintf("needs %d bytes of workspace at n=%d (at most %d allowed)", r.Workspace, n, ltMaxWorkspace), nil
		}
		cfg.Workspace = max(cfg.Workspace, r.Workspace)
	}
	return cfg, "", nil
}

// describe reads algo's configuration. The error is about split-K or the reduction scheme, which pin
// needs; the other attributes are descriptive and left zero when the library refuses them.
func (h *ltHandle) describe(algo *bind.Algo) (cfg ltConfig, err error) {
	err = errors.Join(h.configGet(algo, bind.LtAlgoConfigSplitKNum, unsafe.Pointer(&cfg.SplitK), 4),
		h.configGet(algo, bind.LtAlgoConfigReductionScheme, unsafe.Pointer(&cfg.Reduction), 4))
	for _, f := range []struct {
		attr uintptr
		p    unsafe.Pointer
		size uintptr
	}{
		{bind.LtAlgoConfigID, unsafe.Pointer(&cfg.ID), 4},
		{bind.LtAlgoConfigTileID, unsafe.Pointer(&cfg.Tile), 4},
		{bind.LtAlgoConfigCTASwizzling, unsafe.Pointer(&cfg.Swizzle), 4},
		{bind.LtAlgoConfigCustomOption, unsafe.Pointer(&cfg.Custom), 4},
		{bind.LtAlgoConfigStagesID, unsafe.Pointer(&cfg.Stages), 4},
		{bind.LtAlgoConfigInnerShapeID, unsafe.Pointer(&cfg.InnerShape), 2},
		{bind.LtAlgoConfigClusterShapeID, unsafe.Pointer(&cfg.ClusterShape), 2},
	} {
		_ = h.configGet(algo, f.attr, f.p, f.size) // descriptive only
	}
	return cfg, err
}

// matmul enqueues D (s's output type, n x m row-major) = xb (bf16, n rows of ldb) times the weight w^T with the
// pinned algorithm on stream strm, with ltMaxWorkspace bytes of the workspace ws (the handle's for the
// backend's stream, a side stream's own for that stream: cuda/device/streams.go).
func (h *ltHandle) matmul(s *ltShape, strm uintptr, ws, d, xb, w uint64, n, m, k int) (err error) {
	bdesc, ddesc, err := h.ioLayouts(s, m, k, n)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, h.dropLayout(bdesc), h.dropLayout(ddesc)) }()
	return h.enqueue(s, strm, ws, d, xb, w, bdesc, ddesc, fmt.Sprintf("cublasLtMatmul(%dx%d by %dx%d)", n, k, m, k))
}

// enqueue is one cublasLtMatmul of shape s's pinned algorithm with the layouts of x and the output made
// for the call (matmul, matmulBatch); what names the call in an error.
func (h *ltHandle) enqueue(s *ltShape, strm uintptr, ws, d, xb, w uint64, bdesc, ddesc uintptr, what string) error {
	alpha, beta := float32(1), float32(0) // host pointer mode: read during the call
	algo := s.algo
	rc := bind.Call(h.lib.Matmul, h.handle, h.desc, uintptr(unsafe.Pointer(&alpha)), uintptr(w), s.adesc, uintptr(xb), bdesc,
		uintptr(unsafe.Pointer(&beta)), uintptr(d), ddesc, uintptr(d), ddesc, uintptr(unsafe.Pointer(&algo)), uintptr(ws), ltMaxWorkspace, strm)
	return h.lib.Check(what, rc)
}
