package cuda

import "github.com/potato-k3/potato-k3/replay/ops"

// The router (ops.Backend.Route): its logits by the matmul path of gemm, its selection by route.cu.

// Launch parameters of route.cu. Version 1: one thread per row, routeThreads a block. Version 2: one warp
// per row, up to routeWarps a block, each with 2 x 32 x routePitch(experts) floats of shared memory within
// the default 48 KiB a block (at most 6,112 experts; more run version 1). Rows are routed routeChunk at a
// time so that the chunk's logits (routeChunk x experts float32) stay small.
const (
	routeThreads  = 128
	routeWarps    = 4
	routeSharedV2 = 48 << 10
	routeChunk    = 16384
)

// routePitch is route.cu's route_pitch: the floats a lane's experts take in version 2's shared memory
// (odd, so that no two lanes share a bank).
func routePitch(experts int) int { return (experts+31)/32 | 1 }

// routeWarpsV2 is the warps (rows) of one version 2 block for experts, 0 where one row's shared memory
// exceeds routeSharedV2.
func routeWarpsV2(experts int) int {
	return min(routeWarps, routeSharedV2/(2*32*4*routePitch(experts)))
}

// routeTopK runs route.cu's selection (version 1 or 2, which give the same bits) on the n rows of
// logits (n x experts; version 1 overwrites them with the sigmoids).
func (c *opCtx) routeTopK(version int, ids, ws, logits, bias uint64, n, experts, k int, scale float32) error {
	if w := routeWarpsV2(experts); version == 2 && w > 0 {
		return c.launch("k_route_topk_v2", d1((n+w-1)/w), d1(32*w), w*2*32*4*routePitch(experts),
			ids, ws, logits, bias, int64(n), int32(experts), int32(k), scale)
	}
	return c.launch("k_route_topk", d1((n+routeThreads-1)/routeThreads), d1(routeThreads), 0,
		ids, ws, logits, bias, int64(n), int32(experts), int32(k), scale)
}

// Route runs the router in float32 (K3_SPEC.md 5.5 steps 1-3): logits = x w^T unrounded, then per row in
// k_route_topk_v2 (a warp a row; k_route_topk, a thread a row, past 6,112 experts), with the same bits as
// the CPU backend's statements:
//
//	s[e] = sigmoid(logit[e]); the k largest s[e] + bias[e], by that value descending, ties to the lower id
//	weight = (s[e] / (sum of chosen s in selection order + 1e-20)) * scale
//
// In BF16 precision with cuBLASLt the logits are exact bfloat16 products summed in float32 in the pinned
// algorithm's order (gemm): batch invariant, and within float32 rounding of the CPU backend's ascending
// sums, so a score within rounding of a tie may pick another expert than the CPU backend (the inputs of a
// router differ at that level between the backends anyway, from every matmul before it). Otherwise (FP32
// precision, Options.NoTensorCores or CuBLASLtOff) the logits are the matmul kernel's ascending sums and
// ids and weights equal the CPU backend's bit for bit. cuBLASLt runs the 0.84 TFLOP of a 65,536-token
// wave's router some 40 times faster than the CUDA cores.
func (b *Backend) Route(x, w, bias ops.Tensor, k int, scale float32) (ops.Routing, error) {
	const op = "Route"
	xt, wt, bt, err := b.routeTensors(op, x, w, bias, k)
	if err != nil {
		return ops.Routing{}, err
	}
	rows := xt.rows
	rt := ops.Routing{K: k, IDs: make([]int32, rows*k), Weights: make([]float32, rows*k)}
	if rows == 0 {
		return rt, nil
	}
	err = b.run(op, func(c *opCtx) error {
		ids, ws, err := c.routeRows(xt, wt, bt, k, scale)
		if err != nil {
			return err
		}
		return downloadRouting(b, rt, ids, ws)
	})
	if err != nil {
		return ops.Routing{}, err
	}
	return rt, nil
}

// downloadRouting copies the choices routeRows left on the device (ids, then weights) into rt, waiting
// for the stream.
func downloadRouting(b *Backend, rt ops.Routing, ids, ws uint64) error {
	if err := download(b, rt.IDs, ids); err != nil {
		return err
	}
	return download(b, rt.Weights, ws)
}

// routeTensors checks Route's arguments and returns their tensors.
func (b *Backend) routeTensors(op string, x, w, bias ops.Tensor, k int) (xt, wt, bt *Tensor, err error) {
	ts, err := b.tensors(op, []string{"x", "w", "bias"}, x, w, bias)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := ops.CheckRoute(x, w, bias, k); err != nil {
		return nil, nil, nil, err
	}
	return ts[0], ts[1], ts[2], nil
}

// routeRows queues the router over every row of xt: the choices (ids, then weights, rows x k each) in
// two temporaries of c. The caller has checked the arguments (ops.CheckRoute) and that xt has rows.
func (c *opCtx) routeRows(xt, wt, bt *Tensor, k int, scale float32) (ids, ws uint64, err error) {
	experts, rows := wt.rows, xt.rows
	xp, err := c.xaddr(xt) // gemm reads a narrow-only x's copy (narrow.go)
	if err != nil {
		return 0, 0, err
	}
	bp, err := c.f32(bt)
	if err != nil {
		return 0, 0, err
	}
	chunk := min(routeChunk, rows)
	logits, err := c.temp(4 * chunk * experts)
	if err != nil {
		return 0, 0, err
	}
	// every row's choices on the device (8 bytes a choice), copied out once after the last chunk: a
	// download waits for the stream, so one a chunk left the device idle while the host turned round
	if ids, err = c.temp(4 * rows * k); err != nil {
		return 0, 0, err
	}
	if ws, err = c.temp(4 * rows * k); err != nil {
		return 0, 0, err
	}
	c.xsrc = xt // on cuBLASLt the chunks read x's kept bfloat16 copy, which the MoE's next matmul reads too
	for r0 := 0; r0 < rows; r0 += chunk {
		n := min(chunk, rows-r0)
		if err := c.gemm(logits, xp+uint64(4*r0*xt.cols), n, weightOf(wt), false); err != nil {
			return 0, 0, err
		}
		off := uint64(4 * r0 * k)
		if err := c.routeTopK(2, ids+off, ws+off, logits, bp, n, experts, k, scale); err != nil {
			return 0, 0, err
		}
	}
	return ids, ws, nil
}
