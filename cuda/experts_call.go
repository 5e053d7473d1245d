package cuda

import (
	"fmt"
	"slices"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// One ExpertsAccumulate call, step by step (expertsAccumulate, moe.go, runs them in order): on the
// caller's goroutine the checks and each expert's rows (newExpertsCall), the path's choice (expertsPath)
// and what the path needs before the CUDA thread (the grouped plan, the per-expert row lists); then one
// closure on the CUDA thread that opens the call (begin) and runs the path: grouped on cuBLASLt
// (experts_lt.go), grouped on the package's kernels (experts.go), or expert after expert (moe.go).

// expertsCall is one ExpertsAccumulate call once checked: what every later step reads.
type expertsCall struct {
	at, zt        *Tensor          // acc (float32 sums) and z
	es            []*Expert        // the call's experts, ascending id
	work          []ops.ExpertRows // es[i]'s rows of z and their routing weights
	rows, latent  int              // z's rows and columns
	beta, linBeta float32
	mode          expertsMode
}

// newExpertsCall checks the call's arguments on the caller's goroutine (every error is the caller's,
// before anything is queued) and assigns each expert, in ascending id, the rows that chose it.
func (b *Backend) newExpertsCall(op string, acc, z ops.Tensor, rt ops.Routing, experts []ops.Expert, beta, linBeta float32, mode expertsMode) (*expertsCall, error) {
	ts, err := b.tensors(op, []string{"acc", "z"}, acc, z)
	if err != nil {
		return nil, err
	}
	at, zt := ts[0], ts[1]
	rows, latent := zt.rows, zt.cols
	if err := ops.CheckExpertsAccumulate(acc, z, rt, beta, linBeta); err != nil {
		return nil, err
	}
	if at.dt != dtF32 {
		return nil, argErr(op, "acc %v is a weight, not an activation", at)
	}
	es, err := b.cudaExperts(op, experts, zt)
	if err != nil {
		return nil, err
	}
	ids := make([]int, len(es))
	for i, e := range es {
		ids[i] = e.id
	}
	work, err := rt.AssignRows(ids, rows)
	if err != nil {
		return nil, argErr(op, "%v", err)
	}
	return &expertsCall{at: at, zt: zt, es: es, work: work, rows: rows, latent: latent, beta: beta, linBeta: linBeta, mode: mode}, nil
}

// cudaExperts returns experts as this backend's live experts of z's latent width, sorted by id: the
// outputs are added in ascending expert id whatever order the caller gave (the sums' order is the
// contract, see ExpertsAccumulate).
func (b *Backend) cudaExperts(op string, experts []ops.Expert, zt *Tensor) ([]*Expert, error) {
	latent := zt.cols
	es := make([]*Expert, len(experts))
	for i, x := range experts {
		e, ok := x.(*Expert)
		switch {
		case !ok || e == nil:
			return nil, argErr(op, "experts[%d] is a %T, not a cuda expert", i, x)
		case e.b != b:
			return nil, argErr(op, "experts[%d] (id %d) belongs to another cuda backend", i, e.id)
		case e.freed:
			return nil, fmt.Errorf("%w: %s: expert %d", ErrFreed, op, e.id)
		case e.latent != latent:
			return nil, shapeErr(op, "expert %d has latent width %d, z %v", e.id, e.latent, zt)
		}
		es[i] = e
	}
	slices.SortFunc(es, func(p, q *Expert) int { return p.id - q.id })
	return es, nil
}

// expertsPath chooses the call's path: grouped or not (groupedOK, unless mode forces one; a forced
// grouped path the shapes refuse is an error), and for the grouped path the suffix of its GEMM kernels
// (groupedDev.kernels): "" (mma.sync, or cuBLASLt where it pins both shapes: groupedExperts), "_f32"
// where mode asks for it, or "_wg" where mode asks for it or on Hopper without cuBLASLt. The choice
// depends on the backend, the shapes and mode, never on the rows.
func (b *Backend) expertsPath(op string, latent int, es []*Expert, mode expertsMode) (grouped bool, kernels string, err error) {
	grouped = b.groupedOK(latent, es)
	switch {
	case mode == expertsPerExpert:
		grouped = false
	case mode >= expertsGrouped && !grouped:
		return false, "", argErr(op, "the grouped path does not take precision %v, latent %d and these experts", b.prec, latent)
	}
	if grouped {
		switch {
		case mode == expertsGroupedF32:
			kernels = "_f32"
		case mode == expertsWG && !b.wgOK():
			return false, "", argErr(op, "the wgmma kernels need sm_90a, the device is %s", b.info.Arch)
		case mode == expertsWG, mode == expertsAuto && b.lt == nil && b.wgOK():
			// without cuBLASLt, on Hopper the wgmma kernels (about twice the mma.sync kernels' rate)
			kernels = "_wg"
		}
	}
	return grouped, kernels, nil
}

// runGroupedExperts plans the grouped call's tiles on the caller's goroutine (the wgmma kernels take
// tiles of wTileRows rows, the others xTileRows), then runs it on the CUDA thread (groupedExperts).
func (b *Backend) runGroupedExperts(op string, x *expertsCall, kernels string) error {
	ffn := x.es[0].ffn
	tileRows := xTileRows
	if wgKernels(kernels) {
		tileRows = wTileRows
	}
	plan := planGroupedTiles(x.es, x.work, x.rows, tileRows) // here, not on the CUDA thread: earlier ops' closures need not wait
	return b.run(op, func(c *opCtx) error { return x.groupedExperts(c, &plan, ffn, kernels) })
}

// begin opens the call on the CUDA thread, as both paths do before their own work: the wait for the
// experts' uploads (timed as ops.UploadWait), then the path's timed phase, and acc made ready to take
// float32 sums.
func (x *expertsCall) begin(c *opCtx, phase string) error {
	c.detail = ops.UploadWait
	if err := c.b.joinExperts(x.es); err != nil { // the experts' copies, when they were not waited for
		return err
	}
	if err := c.b.dropNarrow(x.at); err != nil { // acc changes: a bfloat16 copy of it would be stale (narrow.go)
		return err
	}
	if err := c.phase(phase); err != nil {
		return err
	}
	return c.settle(x.at) // acc is read as float32 sums
}

// groupedExperts runs the planned grouped call on the CUDA thread: on cuBLASLt where it pins both expert
// shapes (expertsOnLt), else on the package's kernels named by kernels (expertsGrouped).
func (x *expertsCall) groupedExperts(c *opCtx, plan *groupedPlan, ffn int, kernels string) error {
	if err := x.begin(c, "grouped"+kernels); err != nil {
		return err
	}
	// the cuBLASLt path's gather rounds z to bfloat16 as it loads it (deferred.go); the others
	// settle it below
	zp, err := c.raw(x.zt)
	if err != nil {
		return err
	}
	if kernels == "" && (x.mode == expertsAuto || x.mode == expertsLt) { // cuBLASLt where it pins both shapes: a choice by shape
		if ran, err := x.expertsOnLt(c, plan, zp, ffn); ran || err != nil {
			return err
		}
	}
	if err := c.settle(x.zt); err != nil {
		return err
	}
	return c.expertsGrouped(plan, x.at.ptr, zp, x.latent, ffn, x.beta, x.linBeta, kernels)
}

// expertsOnLt runs the grouped call on cuBLASLt (expertsLt) if it pins an algorithm for both expert shapes
// (a choice by shape, never by rows) and reports whether the call was cuBLASLt's; where it pins none, the
// call falls back to the package's kernels, unless mode forces cuBLASLt (an error).
func (x *expertsCall) expertsOnLt(c *opCtx, plan *groupedPlan, zp uint64, ffn int) (ran bool, err error) {
	gu, dn, why, err := c.ltExpertShapes(x.latent, ffn)
	switch {
	case err != nil:
		return false, err
	case why == "":
		c.detail = "cuBLASLt" // the part after the wait for uploads is all this path's
		// the gather reads z's bfloat16 copy, made by the first call and kept with z for the
		// next (a pooled layer's seven calls share one z): 2 bytes a gathered value, not 4
		var zb uint64
		if x.zt.dt == dtF32 && x.latent%8 == 0 {
			if zb, err = c.narrowOf(x.zt, x.latent); err != nil {
				return true, err
			}
		}
		return true, c.expertsLt(plan, gu, dn, x.at.ptr, zp, zb, x.latent, ffn, x.beta, x.linBeta)
	case x.mode == expertsLt:
		return false, fmt.Errorf("%w: %s: the cuBLASLt path does not take these experts: %s", ErrArgument, c.op, why)
	}
	return false, nil
}

// runPerExpert lists every expert's rows and weights end to end on the caller's goroutine, so that each
// list goes to the device in one upload (two copies a call instead of two per expert), then runs the
// experts one after another on the CUDA thread (perExpert).
func (b *Backend) runPerExpert(op string, x *expertsCall) error {
	var rows32 []int32
	var weights []float32
	first := make([]int, len(x.es))
	for i := range x.es {
		first[i] = len(rows32)
		rows32 = append(rows32, x.work[i].Rows...)
		weights = append(weights, x.work[i].Weights...)
	}
	return b.run(op, func(c *opCtx) error { return x.perExpert(c, rows32, weights, first) })
}

// perExpert runs the per-expert path on the CUDA thread: the two lists uploaded, then each expert with
// rows over its own part of them (expert; first[i] is es[i]'s first entry), in ascending id.
func (x *expertsCall) perExpert(c *opCtx, rows32 []int32, weights []float32, first []int) error {
	if err := x.begin(c, "per-expert"); err != nil {
		return err
	}
	zp, err := c.f32(x.zt)
	if err != nil {
		return err
	}
	idx, err := uploadTemp(c, rows32)
	if err != nil {
		return err
	}
	wts, err := uploadTemp(c, weights)
	if err != nil {
		return err
	}
	for i, e := range x.es {
		if n := len(x.work[i].Rows); n > 0 {
			if err := c.expert(e, x.at.ptr, zp, x.latent, n, idx+uint64(4*first[i]), wts+uint64(4*first[i]), x.beta, x.linBeta); err != nil {
				return fmt.Errorf("expert %d (%d rows): %w", e.id, n, err)
			}
		}
	}
	return nil
}
