package cuda

import (
	"fmt"
	"strings"

	"github.com/potato-k3/potato-k3/replay/ops"
)

// Launch parameters of norm.cu: version 1, one warp per group (k_rmsnorm) or row (k_attnres), 8 warps a
// block of 256 threads, ceil(groups / 8) blocks; version 2 (norm2), blocks of 256 threads too. The warp
// count per block only places the work: each group's sums run in the same lanes in the same order
// whatever block it falls in.
const (
	normThreads = 256
	normWarps   = normThreads / 32
)

// norm2Max is the widest group or row version 2 takes: 8 warps of 32 threads, 8 chunks of 4 values each.
const norm2Max = 8192

// norm2CPT is the chunks of 4 values a thread holds for a width of w values over threads threads: the
// smallest of 1, 2, 4 and 8 that covers it (norm.cu instantiates those).
func norm2CPT(w, threads int) int {
	need := (w/4 + threads - 1) / threads
	cpt := 1
	for cpt < need {
		cpt *= 2
	}
	return cpt
}

// rmsnorm2Kernel names the version 2 kernel for groups of g values and its grid for groups groups: one
// warp a group up to 1,024 values (8 groups a block), else a block of 8 warps a group; ok is false where
// version 2 does not apply (g not a multiple of 4, wider than norm2Max, an operand not 16-byte aligned),
// and version 1 runs. A choice by g and the operands' alignment (allocations are always aligned), never
// by the number of groups.
func rmsnorm2Kernel(g, groups int, ptrs ...uint64) (name string, grid int, ok bool) {
	if !norm2Fits(g, ptrs...) {
		return "", 0, false
	}
	if g <= 1024 {
		return fmt.Sprintf("k_rmsnorm2_w1_c%d", norm2CPT(g, 32)), (groups + normWarps - 1) / normWarps, true
	}
	return fmt.Sprintf("k_rmsnorm2_w8_c%d", norm2CPT(g, normThreads)), groups, true
}

// rmsnorm2Name is rmsnorm2Kernel's name for groups of g values, whatever the operands (for the choice of
// a form before they are known).
func rmsnorm2Name(g int) string {
	name, _, _ := rmsnorm2Kernel(g, 1)
	return name
}

// gatedKernel names the gated form's instance for version 2 kernel name: one warp a group with at most
// two chunks a thread (K3's KDA output, groups of 128) takes k_rmsnorm2g, which loads the gate beside x
// before the sums (norm.cu, rmsnorm2's PG); late keeps name (tests compare the two).
func gatedKernel(name string, late bool) string {
	if late {
		return name
	}
	switch name {
	case "k_rmsnorm2_w1_c1", "k_rmsnorm2_w1_c2":
		return "k_rmsnorm2g" + strings.TrimPrefix(name, "k_rmsnorm2")
	}
	return name
}

// attnres2Kernel names the version 2 AttnResMix kernel for rows of cols values (a block a row), or ok
// false where version 1 runs (as rmsnorm2Kernel).
func attnres2Kernel(cols int, ptrs ...uint64) (name string, ok bool) {
	if !norm2Fits(cols, ptrs...) {
		return "", false
	}
	return fmt.Sprintf("k_attnres2_c%d", norm2CPT(cols, normThreads)), true
}

// norm2Fits reports whether version 2 takes a group or row of w values with these operands: w a
// multiple of 4 from 4 to norm2Max, every operand 16-byte aligned.
func norm2Fits(w int, ptrs ...uint64) bool {
	return w%4 == 0 && w > 0 && w <= norm2Max && aligned16(ptrs...)
}

// keepsNarrow reports whether RMSNorm and GatedRMSNorm write their output's bfloat16 copy (narrow.go) for
// rows of cols values: in BF16 precision on cuBLASLt, where the next MatMul (or the router, or the fused
// FFN) reads x as bfloat16, and for widths whose copy has cuBLASLt's row stride (cols a multiple of 8).
// The copy holds the output's own values, so no result changes whether it is there or not.
func (b *Backend) keepsNarrow(cols int) bool {
	return b.bf == 1 && b.lt != nil && !b.opts.NoTensorCores && cols%8 == 0
}

// aligned16 reports whether every device address is a multiple of 16 (a float4's alignment).
func aligned16(ptrs ...uint64) bool {
	for _, p := range ptrs {
		if p%16 != 0 {
			return false
		}
	}
	return true
}

// RMSNorm normalises each group of g = w.Cols() columns (k_rmsnorm2_*, norm.cu version 2, for g a
// multiple of 4 up to 8,192; k_rmsnorm else): per group, in float32, of v = x rounded as the kernels read
// it (the routed experts' float32 sum comes so, ops.Backend.RMSNorm),
//
//	inv = float32(1 / sqrt(sumsq / g + eps))   // sumsq: per-thread partial sums, then a fixed butterfly
//	out[d] = rounded(rounded(v[d] * inv) * w[d])
//
// The norm factor's float32 sum order (norm.cu's version list gives both versions') differs from the CPU
// backend's single ascending sum (rounding level); it depends on g only, never on the rows or the wave.
// Version 2 also writes the output's bfloat16 copy where keepsNarrow says so, and then only the copy
// unless Options.EagerWidening (narrow.go: narrow-only outputs).
func (b *Backend) RMSNorm(x, w ops.Tensor, eps float32) (ops.Tensor, error) {
	return b.norm("RMSNorm", x, w, nil, eps)
}

// GatedRMSNorm is RMSNorm followed by rounded(out * sigmoid(gate)) in the same kernel, with the same
// statements as MulSigmoid: equal to MulSigmoid(RMSNorm(x, w, eps), gate) bit for bit. Like MulSigmoid,
// the kernels round the gate as they load it (a deferred rounding, deferred.go).
func (b *Backend) GatedRMSNorm(x, w, gate ops.Tensor, eps float32) (ops.Tensor, error) {
	if gate == nil {
		return nil, argErr("GatedRMSNorm", "gate is nil")
	}
	return b.norm("GatedRMSNorm", x, w, gate, eps)
}

func (b *Backend) norm(op string, x, w, gate ops.Tensor, eps float32) (ops.Tensor, error) {
	names, args := []string{"x", "w"}, []ops.Tensor{x, w}
	if gate != nil {
		names, args = append(names, "gate"), append(args, gate)
	}
	ts, err := b.tensors(op, names, args...)
	if err != nil {
		return nil, err
	}
	if err := ops.CheckNorm(op, x, w, gate); err != nil {
		return nil, err
	}
	xt, wt := ts[0], ts[1]
	g := wt.cols
	var gt *Tensor
	if gate != nil {
		gt = ts[2]
	}
	groups := xt.rows * (xt.cols / g)
	var out *Tensor
	err = b.run(op, func(c *opCtx) error {
		// KDA's narrow-only output (kda.go) is read from its bfloat16 copy where the gated kernel that
		// loads the gate early runs (k_rmsnorm2gb); every other x as float32, rounded as read (the routed
		// experts' sum comes unrounded)
		narrowX := gt != nil && !b.gateLate && b.normVer != 1 && narrowInput(xt) && gatedKernel(rmsnorm2Name(g), false) != rmsnorm2Name(g)
		xp := xt.narrow
		if !narrowX {
			var err error
			if xp, err = c.raw(xt); err != nil {
				return err
			}
		}
		wp, err := c.f32(wt)
		if err != nil {
			return err
		}
		var gp uint64
		if gt != nil { // both kernels round the gate as they load it (deferred.go)
			if gp, err = c.raw(gt); err != nil {
				return err
			}
		}
		if out, err = c.out(xt.rows, xt.cols); err != nil || groups == 0 {
			return err
		}
		ptrs := []uint64{out.ptr, xp, wp}
		if gp != 0 {
			ptrs = append(ptrs, gp)
		}
		if name, grid, ok := rmsnorm2Kernel(g, groups, ptrs...); ok && b.normVer != 1 {
			if gp != 0 {
				name = gatedKernel(name, b.gateLate)
			}
			if narrowX {
				name = strings.Replace(name, "k_rmsnorm2g_", "k_rmsnorm2gb_", 1)
			}
			// op: the float32 output, or 0 where the copy alone holds it; nb: the bfloat16 copy the next
			// MatMul reads, or 0 (narrow.go)
			launch := func(op, nb uint64) error {
				return c.launch(name, d1(grid), d1(normThreads), 0, op, xp, wp, gp, int64(groups), int32(g), eps, b.bf, nb)
			}
			if b.keepsNarrow(xt.cols) {
				return c.keepNarrowOutput(out, launch)
			}
			return launch(out.ptr, 0)
		}
		if narrowX { // never: the narrow x's kernel fits wherever its float32 form does
			if xp, err = c.raw(xt); err != nil {
				return err
			}
		}
		return c.launch("k_rmsnorm", d1((groups+normWarps-1)/normWarps), d1(normThreads), 0,
			out.ptr, xp, wp, gp, int64(groups), int32(g), eps, b.bf)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AttnResMix mixes vs per row with softmax weights (K3_SPEC.md 5.1; k_attnres). Per row, in float32:
//
//	inv_i = float32(1 / sqrt(sumsq(v_i) / cols + 1e-5)); score_i = dot(wg, v_i) * inv_i
//	p = softmax(score)   // max shift, e_i = float32(exp(score_i - max)), ascending sum, e_i / sum
//	out[d] = rounded(sum_i p_i * v_i[d])   // ascending i
//
// sumsq and dot are per-thread partial sums with a fixed butterfly (see RMSNorm; k_attnres2_*, a block a
// row, for cols a multiple of 4 up to 8,192, else k_attnres). It returns p, rows x len(vs).
func (b *Backend) AttnResMix(vs []ops.Tensor, wg ops.Tensor) (ops.Tensor, []float32, error) {
	return b.attnResMix(vs, wg, true)
}

// AttnResMixQuiet implements ops.QuietMixer: AttnResMix's kernels without the copy of p to the host, the
// op's only wait for the device, so the host goes on queueing work while the mix runs. The op profile
// keys it as AttnResMix (the same work on the device).
func (b *Backend) AttnResMixQuiet(vs []ops.Tensor, wg ops.Tensor) (ops.Tensor, error) {
	out, _, err := b.attnResMix(vs, wg, false)
	return out, err
}

// attnResMix is AttnResMix, with p copied to the host only when weights is true (else p is nil).
func (b *Backend) attnResMix(vs []ops.Tensor, wg ops.Tensor, weights bool) (ops.Tensor, []float32, error) {
	const op = "AttnResMix"
	v, wt, err := b.mixOperands(op, vs, wg)
	if err != nil {
		return nil, nil, err
	}
	rows, cols, n := v[0].rows, v[0].cols, len(v)
	var out *Tensor
	var p []float32
	if weights {
		p = make([]float32, rows*n)
	}
	err = b.run(op, func(c *opCtx) error {
		ptrs, wp, err := c.mixInputs(v, wt)
		if err != nil {
			return err
		}
		if out, err = c.out(rows, cols); err != nil || rows == 0 {
			return err
		}
		vsp, pp, err := c.mixTables(ptrs, rows)
		if err != nil {
			return err
		}
		if name, ok := attnres2Kernel(cols, append(ptrs, wp, out.ptr)...); ok && b.normVer != 1 {
			err = c.launch(name, d1(rows), d1(normThreads), 4*n,
				out.ptr, pp, vsp, int32(n), wp, int64(rows), int32(cols), b.bf)
		} else {
			err = c.launch("k_attnres", d1((rows+normWarps-1)/normWarps), d1(normThreads), 0,
				out.ptr, pp, vsp, int32(n), wp, int64(rows), int32(cols), b.bf)
		}
		if err != nil {
			return err
		}
		return download(b, p, pp) // nothing, and no wait for the device, when p is nil
	})
	if err != nil {
		return nil, nil, err
	}
	return out, p, nil
}

// mixOperands checks AttnResMix's arguments (op names them in errors) and returns them as tensors.
func (b *Backend) mixOperands(op string, vs []ops.Tensor, wg ops.Tensor) ([]*Tensor, *Tensor, error) {
	wt, err := b.tensor(op, "wg", wg)
	if err != nil {
		return nil, nil, err
	}
	v := make([]*Tensor, len(vs))
	for i, x := range vs {
		if v[i], err = b.tensor(op, fmt.Sprintf("vs[%d]", i), x); err != nil {
			return nil, nil, err
		}
	}
	if err := ops.CheckAttnResMix(vs, wg); err != nil {
		return nil, nil, err
	}
	return v, wt, nil
}

// mixInputs returns the float32 addresses of a mix's vectors and of wg.
func (c *opCtx) mixInputs(v []*Tensor, wt *Tensor) (ptrs []uint64, wp uint64, err error) {
	ptrs = make([]uint64, len(v))
	for i, t := range v {
		if ptrs[i], err = c.f32(t); err != nil {
			return nil, 0, err
		}
	}
	wp, err = c.f32(wt)
	return ptrs, wp, err
}

// mixTables returns the device table of a mix's vector addresses and a temporary for its weights p
// (rows x len(ptrs)).
func (c *opCtx) mixTables(ptrs []uint64, rows int) (vsp, pp uint64, err error) {
	if vsp, err = uploadTemp(c, ptrs); err != nil {
		return 0, 0, err
	}
	pp, err = c.temp(4 * rows * len(ptrs))
	return vsp, pp, err
}
