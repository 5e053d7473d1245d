package cuda

import (
	"fmt"
	"math"
	"strings"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// The grouped expert path of ExpertsAccumulate (kernels/experts.cu): in BF16 precision on the tensor
// cores, one launch for the gate and up GEMMs of every expert of the call (SiTU in its epilogue), one for
// the w2 GEMMs and one that adds each accumulator row's expert outputs in ascending expert id (and two
// small ones: the gather of the rows, SiTU's tables), instead of six launches per expert. With the
// mma.sync kernels (experts.cu) its result equals the per-expert path (moe.go) bit for bit, and the test
// experts_grouped_test.go holds it to that; with the wgmma kernels (experts_wg.cu, sm_90a) it is within
// rounding of them and equal to itself across subsets (experts_wg_test.go).

// Launch parameters of experts.cu (versions 1 and 2): 256 threads a block, tiles of 128 rows by 64 gate/up
// columns (128 weight rows: 64 of w1, 64 of w3) or 128 w2 columns, 92,160 bytes of dynamic shared memory
// (three 128 x 72 bfloat16 activation panels, two weight panels), two blocks an SM.
const (
	xTileRows    = 128
	xGateCols    = 64
	xDownCols    = 128
	xThreads     = 256
	xSmemBytes   = (3*128 + 2*128) * 72 * 2
	xCombThread  = 256
	xCombThread4 = 128 // k_experts_combine4: 512 columns an iteration, 7 at K3's latent of 3,584
	// cuFuncAttrPreferredSharedCarveout is CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: the share
	// of the L1/shared array asked for as shared memory, in percent.
	cuFuncAttrPreferredSharedCarveout = 9
)

// expertsMode picks the path of expertsAccumulate: by precision, options and shapes, or forced (tests).
type expertsMode int

const (
	expertsAuto expertsMode = iota
	expertsPerExpert
	expertsGrouped
	expertsGroupedF32 // the grouped path with the float32-multiply decoder (k_experts_*_f32)
	expertsLt         // the grouped path's plan with the GEMMs on cuBLASLt (experts_lt.go)
	expertsWG         // the grouped path with the GEMMs on wgmma (kernels/experts_wg.cu; sm_90a only)
)

// Launch parameters of experts_wg.cu (version 3): 256 threads a block (two warpgroups), tiles of 256
// gathered rows by 64 gate/up columns (128 weight rows: 64 of w1, 64 of w3) or 128 w2 columns, four
// 32 KiB activation stages plus 1 KiB of alignment.
const (
	wTileRows  = 256
	wGateCols  = 64
	wDownCols  = 128
	wSmemBytes = 4*256*64*2 + 1024
)

// wgKernels reports whether the kernel forms named by suffix (groupedDev.kernels) are experts_wg.cu's,
// which take tiles of wTileRows rows and their own launch shape.
func wgKernels(suffix string) bool { return strings.HasPrefix(suffix, "_wg") }

// wgOK reports whether the wgmma kernels run on this backend's device: they are compiled for sm_90a
// (Hopper's arch-specific target) and are empty elsewhere.
func (b *Backend) wgOK() bool { return b.info.Arch == "sm_90a" }

// groupedOK reports whether the grouped kernels take this call: BF16 precision on the tensor cores, and
// latent and one common ffn multiples of 32 (whole MXFP4 scale groups, 16-byte aligned rows). The choice
// depends on the backend and the shapes only, never on the rows.
func (b *Backend) groupedOK(latent int, es []*Expert) bool {
	if b.bf != 1 || b.opts.NoTensorCores || latent%32 != 0 || len(es) == 0 {
		return false
	}
	for _, e := range es {
		if e.ffn != es[0].ffn || e.ffn%32 != 0 {
			return false
		}
	}
	return true
}

// groupedDev is a grouped call on the device: the uploaded plan and the temporaries.
type groupedDev struct {
	plan               *groupedPlan
	tab                uint64 // the plan's buffer
	zs, h              uint64 // gathered rows (bfloat16, rows x latent; reused for the w2 outputs), SiTU (rows x ffn)
	situ               uint64 // the SiTU factor tables (2 x 65,536 float32)
	acc, z             uint64
	zb                 uint64 // z's bfloat16 copy (narrow.go) where the call has one, else 0: the gather reads it
	latent, ffn        int
	beta, linBeta      float32
	gateNCol, downNCol int
	smem               int    // dynamic shared memory of the GEMM kernels
	kernels            string // "" (the kernels of X_DEC), or "_f32" or "_nodec": the other forms, for tests; "_wg" (and "_wg_nodec") on wgmma
}

// at returns the device address of int32 offset off of the plan's buffer.
func (d *groupedDev) at(off int) uint64 { return d.tab + 4*uint64(off) }

// prepareGrouped uploads the plan and allocates the temporaries (freed when the op ends): 2 bytes a
// value of rows x (latent + ffn), proportional to the call. suffix names the GEMM kernels' form
// (groupedDev.kernels); the wgmma forms set the column tiles and shared memory of experts_wg.cu.
func (c *opCtx) prepareGrouped(p *groupedPlan, acc, z uint64, latent, ffn int, beta, linBeta float32, suffix string) (*groupedDev, error) {
	d := &groupedDev{plan: p, acc: acc, z: z, latent: latent, ffn: ffn, beta: beta, linBeta: linBeta,
		gateNCol: (ffn + xGateCols - 1) / xGateCols, downNCol: (latent + xDownCols - 1) / xDownCols, smem: xSmemBytes, kernels: suffix}
	// The two GEMM kernels this call launches (groupedGateUp, groupedDown); only these are asked for
	// their shared memory below: the tests' other forms are not loaded in production (kernels.go, dev).
	kernels := []string{"k_experts_gateup" + suffix, "k_experts_down" + suffix}
	if wgKernels(suffix) {
		d.gateNCol, d.downNCol, d.smem = (ffn+wGateCols-1)/wGateCols, (latent+wDownCols-1)/wDownCols, wSmemBytes
	}
	if int64(p.tiles)*int64(max(d.gateNCol, d.downNCol)) > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %s: %d row tiles x %d column tiles exceed a grid", ErrArgument, c.op, p.tiles, max(d.gateNCol, d.downNCol))
	}
	if p.rows > math.MaxInt32 { // the tables index gathered rows with int32 (element offsets are 64-bit)
		return nil, fmt.Errorf("%w: %s: %d gathered rows, more than the tables' 2^31-1", ErrArgument, c.op, p.rows)
	}
	var err error
	if d.tab, err = uploadTemp(c, p.buf); err != nil {
		return nil, err
	}
	if d.zs, err = c.temp(2 * p.rows * latent); err != nil {
		return nil, err
	}
	if d.h, err = c.temp(2 * p.rows * ffn); err != nil {
		return nil, err
	}
	if d.situ, err = c.temp(4 * 2 * 65536); err != nil {
		return nil, err
	}
	b, drv := c.b, c.b.drv
	for _, k := range kernels {
		// Above 48 KiB a kernel must opt in; asking for all of the carveout lets two blocks share an SM.
		// Set per call: cheap, and it keeps the setting beside the launches that need it.
		if err := drv.Check("cuFuncSetAttribute("+k+", max dynamic shared memory)",
			bind.Call(drv.CuFuncSetAttribute, b.fn(k), bind.FuncAttrMaxDynamicSharedBytes, uintptr(d.smem))); err != nil {
			return nil, err
		}
		if err := drv.Check("cuFuncSetAttribute("+k+", shared carveout)",
			bind.Call(drv.CuFuncSetAttribute, b.fn(k), cuFuncAttrPreferredSharedCarveout, 100)); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// groupedGather launches the gather of the call's rows of z, expert by expert, as bfloat16:
// k_experts_gather8b from z's bfloat16 copy where the call has one (d.zb, rows of latent values, latent a
// multiple of 8), else k_experts_gather8 (eight columns a thread, rows on the grid's y) where latent is a
// multiple of 8 and z 16-byte aligned, else k_experts_gather (four a thread, grid-stride); the same values.
func (c *opCtx) groupedGather(d *groupedDev) error {
	const threads = 128
	groups := d.latent / 8
	grid := d2((groups+threads-1)/threads, min(d.plan.rows, maxGridY))
	switch {
	case d.zb != 0 && d.latent%8 == 0 && d.zb%16 == 0:
		return c.launch("k_experts_gather8b", grid, d1(threads), 0, d.zs, d.zb, d.at(d.plan.offRows), int64(d.plan.rows), int32(d.latent))
	case d.latent%8 != 0 || d.z%16 != 0:
		return c.launch1D("k_experts_gather", d.plan.rows*d.latent/4, d.zs, d.z, d.at(d.plan.offRows), int64(d.plan.rows), int32(d.latent))
	}
	return c.launch("k_experts_gather8", grid, d1(threads), 0, d.zs, d.z, d.at(d.plan.offRows), int64(d.plan.rows), int32(d.latent))
}

// groupedSiTUTables launches k_experts_situ_tables: SiTU's two factors over the 65,536 bfloat16 inputs.
func (c *opCtx) groupedSiTUTables(d *groupedDev) error {
	return c.launch("k_experts_situ_tables", d1(2*65536/xThreads), d1(xThreads), 0, d.situ, d.beta, d.linBeta)
}

// groupedGateUp launches k_experts_gateup: h = rounded SiTU of the rounded gate and up GEMMs.
func (c *opCtx) groupedGateUp(d *groupedDev) error {
	return c.launch("k_experts_gateup"+d.kernels, d1(d.plan.tiles*d.gateNCol), d1(xThreads), d.smem,
		d.h, d.zs, d.at(d.plan.offTiles), d.tab, int32(d.gateNCol), int32(d.ffn), int32(d.latent), d.situ)
}

// groupedDown launches k_experts_down: the rounded w2 GEMMs, written over the gathered rows.
func (c *opCtx) groupedDown(d *groupedDev) error {
	return c.launch("k_experts_down"+d.kernels, d1(d.plan.tiles*d.downNCol), d1(xThreads), d.smem,
		d.zs, d.h, d.at(d.plan.offTiles), d.tab, int32(d.downNCol), int32(d.latent), int32(d.ffn))
}

// groupedCombine launches the combine: acc rows += their weighted expert outputs, ascending id:
// k_experts_combine4 (four columns a thread) where latent is a multiple of 4 and acc 16-byte aligned, else
// k_experts_combine (two a thread); the same sums.
func (c *opCtx) groupedCombine(d *groupedDev) error {
	if d.latent%4 == 0 && d.acc%16 == 0 && d.zs%8 == 0 {
		return c.launch("k_experts_combine4", d1(d.plan.touched), d1(xCombThread4), 0,
			d.acc, d.zs, d.at(d.plan.offRowPtr), d.at(d.plan.offRowID), d.at(d.plan.offPos), d.at(d.plan.offW), int32(d.latent))
	}
	return c.launch("k_experts_combine", d1(d.plan.touched), d1(xCombThread), 0,
		d.acc, d.zs, d.at(d.plan.offRowPtr), d.at(d.plan.offRowID), d.at(d.plan.offPos), d.at(d.plan.offW), int32(d.latent))
}

// expertsGrouped runs one planned grouped call (planGrouped, on the caller's goroutine): one upload, five
// launches (kernels: see groupedDev).
func (c *opCtx) expertsGrouped(p *groupedPlan, acc, z uint64, latent, ffn int, beta, linBeta float32, kernels string) error {
	if p.rows == 0 {
		return nil
	}
	d, err := c.prepareGrouped(p, acc, z, latent, ffn, beta, linBeta, kernels)
	if err != nil {
		return err
	}
	for _, step := range []struct {
		name string
		fn   func(*groupedDev) error
	}{{"gather", c.groupedGather}, {"SiTU tables", c.groupedSiTUTables}, {"gate/up", c.groupedGateUp},
		{"down", c.groupedDown}, {"combine", c.groupedCombine}} {
		if err := step.fn(d); err != nil {
			return fmt.Errorf("grouped experts (%d experts, %d rows): %s: %w", p.experts, p.rows, step.name, err)
		}
	}
	return nil
}
