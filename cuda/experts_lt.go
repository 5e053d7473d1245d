package cuda

import (
	"errors"
	"fmt"

	"github.com/potato-k3/potato-k3/cuda/bind"
)

// The cuBLASLt path of the grouped experts (kernels/experts.cu, version 4): the call is planned and its
// rows gathered as on the grouped path (experts.go), then the experts with rows are taken a chunk at a
// time: one launch decodes the chunk's MXFP4 weights to bfloat16, and each expert's rows, a block at a
// time, go through two cuBLASLt GEMMs with bfloat16 outputs and the algorithm pinned per shape
// (cublaslt_plan.go):
//
//	gu = rnd(zs[rows_e] . [w1_e; w3_e]^T)              bfloat16, n x 2 ffn (one GEMM for gate and up)
//	h[rows_e] = rnd(situ(gu[:, :ffn], gu[:, ffn:]))     k_experts_situ_rows, bfloat16
//	zs[rows_e] = rnd(h[rows_e] . w2_e^T)               bfloat16, over the rows' place in zs
//
// and the combine adds each accumulator row's outputs in ascending expert id, as on the grouped path.
// The rounding points and the decoded values are the grouped path's (cuBLASLt's epilogue rounds each
// float32 sum to nearest even); each output element is one float32 sum in the pinned algorithm's order,
// which depends on the shape only: a row's result is the same whatever the expert's other rows, the block
// it falls in, the chunk or the other experts of the call (batch invariant), and calls on ascending expert
// subsets equal one call. Nothing promises the grouped kernels' order of the sums: the tests hold this
// path to them within rounding and to itself bit for bit (on the H200 with cuBLASLt 13.1 the float32-output
// algorithms of version 3 came out bit-identical to the grouped kernels at every shape tested).

// ltExpertRows is the most rows of one expert that one pair of GEMMs takes: it bounds a lane's gate/up
// scratch (4,096 x 2 x 3,072 bfloat16 values = 50 MB at K3's sizes) and keeps every GEMM large enough for
// cuBLASLt's big tiles. A row's bits do not depend on the block it falls in. A pooled call gives each
// expert about 4,700 rows at 262,144 tokens, and alone the 600-row rest runs at 250-300 TFLOP/s against
// 660-740 for the full block; but in the call, with the lanes, blocks of 8,192 rows were no faster (562
// ms against 555 for the whole layer's experts, docs/records/run57): the other lanes fill what a small
// GEMM leaves.
const ltExpertRows = 4096

// ltDecodeBytes bounds the decoded bfloat16 weights of one chunk of experts (K3: 66 MB an expert, so 16
// experts a chunk). With side streams two chunks' buffers alternate (experts_lt_lanes.go), so the next
// chunk decodes, on the compute stream, while this one's GEMMs run on the lanes (a decode on a second
// stream beside one stream of GEMMs gained nothing: cuda/records/JOURNAL.md, run 11). Tests take it down to one
// expert a chunk (Backend.decodeBytes).
const ltDecodeBytes = 1 << 30

// ltExpertShapes returns the pinned plans of the two expert GEMMs with bfloat16 outputs, gate and up
// together (2 ffn x latent) and down (latent x ffn), and whether both exist and take the operands as the path lays them out (rows
// of exactly latent and ffn bfloat16 values). A choice by shape only, never by rows. Runs on the CUDA
// thread (plans are made, and tuned, on first use).
func (c *opCtx) ltExpertShapes(latent, ffn int) (gu, dn *ltShape, why string, err error) {
	lt := c.b.lt
	switch {
	case lt == nil:
		return nil, nil, "cuBLASLt is not in use", nil
	case c.b.bf != 1 || c.b.opts.NoTensorCores:
		return nil, nil, "not BF16 precision on the tensor cores", nil
	}
	if gu, err = lt.shapeOut(2*ffn, latent, bind.R16BF); err != nil {
		return nil, nil, "", err
	}
	if dn, err = lt.shapeOut(latent, ffn, bind.R16BF); err != nil {
		return nil, nil, "", err
	}
	switch {
	case !gu.ok:
		return nil, nil, fmt.Sprintf("no pinned algorithm for the gate/up shape %dx%d: %s", 2*ffn, latent, gu.why), nil
	case !dn.ok:
		return nil, nil, fmt.Sprintf("no pinned algorithm for the down shape %dx%d: %s", latent, ffn, dn.why), nil
	case gu.ldb != latent || dn.ldb != ffn:
		return nil, nil, fmt.Sprintf("latent %d and ffn %d are not multiples of 8", latent, ffn), nil
	}
	// the heuristic's first is far from the fastest at an expert's rows (cublaslt_tune.go); same bits
	if err := c.ltTune(gu, 2*ffn, latent, ltExpertTuneN); err != nil {
		return nil, nil, "", fmt.Errorf("tuning the gate/up GEMM: %w", err)
	}
	if err := c.ltTune(dn, latent, ffn, ltExpertTuneN); err != nil {
		return nil, nil, "", fmt.Errorf("tuning the down GEMM: %w", err)
	}
	return gu, dn, "", nil
}

// expertsLt runs one planned call on the cuBLASLt path (gu, dn: ltExpertShapes' plans; zb: z's bfloat16
// copy, rows of latent values, or 0: the gather then reads z's float32 values).
func (c *opCtx) expertsLt(p *groupedPlan, gu, dn *ltShape, acc, z, zb uint64, latent, ffn int, beta, linBeta float32) (err error) {
	if p.rows == 0 {
		return nil
	}
	d, err := c.prepareGrouped(p, acc, z, latent, ffn, beta, linBeta, "")
	if err != nil {
		return err
	}
	d.zb = zb
	c.stepDone("prepare (plan upload, temporaries)")
	if err := c.groupedGather(d); err != nil {
		return fmt.Errorf("experts on cuBLASLt (%d experts, %d rows): gather: %w", p.experts, p.rows, err)
	}
	c.stepDone("gather")
	if err := c.groupedSiTUTables(d); err != nil {
		return fmt.Errorf("experts on cuBLASLt: SiTU tables: %w", err)
	}
	c.stepDone("SiTU tables")
	slot := 3 * ffn * latent // decoded values an expert
	budget := ltDecodeBytes
	if c.b.decodeBytes > 0 {
		budget = c.b.decodeBytes
	}
	chunk := max(1, min(len(p.nonzero), budget/(2*slot)))
	most := 0
	for _, n := range p.counts {
		most = max(most, n)
	}
	x := ltExperts{d: d, gu: gu, dn: dn, block: min(most, c.b.ltBlockRows()), first: make([]int, len(p.counts))}
	for i := 1; i < len(p.counts); i++ { // each expert's first gathered row
		x.first[i] = x.first[i-1] + p.counts[i-1]
	}
	// on every return the compute stream waits for the lanes first: the op's temporaries are freed on it
	defer func() {
		if jerr := x.join(c); jerr != nil {
			err = errors.Join(err, fmt.Errorf("experts on cuBLASLt: %w", jerr))
		}
	}()
	if err := x.setup(c, slot, chunk, max(1, budget/(2*slot)), (len(p.nonzero)+chunk-1)/chunk); err != nil {
		return fmt.Errorf("experts on cuBLASLt: %w", err)
	}
	c.stepDone("setup (lanes, kept buffers)")
	for j0, ci := 0, 0; j0 < len(p.nonzero); j0, ci = j0+chunk, ci+1 {
		cnt := min(chunk, len(p.nonzero)-j0)
		wdec := x.wdec[ci%len(x.wdec)]
		if err := x.reuse(c, ci); err != nil {
			return fmt.Errorf("experts on cuBLASLt: %w", err)
		}
		c.stepDone("wait for the decode buffer")
		if err := c.decodeExperts(wdec, d.tab, d.at(p.offList+j0), cnt, ffn, latent); err != nil {
			return fmt.Errorf("experts on cuBLASLt: decoding experts %d..%d of the call: %w", j0, j0+cnt-1, err)
		}
		c.stepDone("decode")
		if err := x.start(c); err != nil {
			return fmt.Errorf("experts on cuBLASLt: %w", err)
		}
		for j := range cnt {
			i := p.nonzero[j0+j]
			if err := x.expert(c, i, p.counts[i], wdec+uint64(2*slot*j)); err != nil {
				return err
			}
		}
		c.stepDone("experts' GEMMs and SiTU")
		if err := x.finish(c, ci); err != nil {
			return fmt.Errorf("experts on cuBLASLt: %w", err)
		}
	}
	if err := x.join(c); err != nil {
		return fmt.Errorf("experts on cuBLASLt: %w", err)
	}
	c.stepDone("join the lanes")
	if err := c.groupedCombine(d); err != nil {
		return fmt.Errorf("experts on cuBLASLt: combine: %w", err)
	}
	c.stepDone("combine")
	return nil
}

// decodeExperts decodes the MXFP4 weights of the n experts listed at list (indices into the pointer
// table tab, the start of the call's plan buffer) to bfloat16, expert j's three matrices in slot j of out
// (3 ffn latent values: w1, w3, w2): k_experts_decode8, a 4-byte word a thread (k_experts_decode, a
// 16-byte group a thread, wrote 2.0 TB/s, run 71); the same values.
func (c *opCtx) decodeExperts(out, tab, list uint64, n, ffn, latent int) error {
	words := ffn * latent / 8
	return c.launch("k_experts_decode8", dim3{(words + xThreads - 1) / xThreads, n, 3}, d1(xThreads), 0,
		out, tab, list, int32(ffn), int32(latent))
}

// situRows launches the SiTU pass between the expert GEMMs over n rows of gub into h (ffn columns each):
// k_experts_situ_rows8, eight columns a thread with 16-byte loads and stores, where ffn is a multiple of 8
// (rows then start 16-byte aligned); else k_experts_situ_rows, an element a thread. Both compute each
// element alike (the same bits).
func (c *opCtx) situRows(h, gub uint64, n, ffn int, tab uint64) error {
	if ffn%8 != 0 {
		return c.launch1D("k_experts_situ_rows", n*ffn, h, gub, int64(n), int32(ffn), tab)
	}
	const threads = 128
	groups := ffn / 8
	return c.launch("k_experts_situ_rows8", d2((groups+threads-1)/threads, min(n, maxGridY)), d1(threads), 0,
		h, gub, int64(n), int32(ffn), tab)
}

// ltBlockRows is the rows of one GEMM block of the cuBLASLt expert path: ltExpertRows, or the tests' knob.
func (b *Backend) ltBlockRows() int {
	if b.expertRows > 0 {
		return b.expertRows
	}
	return ltExpertRows
}

// expertLtRows runs gathered rows row .. row+n-1 (one expert's, n <= ltExpertRows) through the expert
// whose decoded weights are at w: the gate/up GEMM into gub, SiTU into d.h, and the down GEMM's rounded
// result over the rows' place in d.zs (whose gate/up GEMM has run: same stream).
func (c *opCtx) expertLtRows(d *groupedDev, gu, dn *ltShape, w, gub uint64, row, n int) error {
	latent, ffn := d.latent, d.ffn
	zs, h := d.zs+uint64(2*row*latent), d.h+uint64(2*row*ffn)
	if err := c.ltGemm(gu, gub, zs, w, n, 2*ffn, latent); err != nil {
		return fmt.Errorf("gate/up: %w", err)
	}
	if err := c.situRows(h, gub, n, ffn, d.situ); err != nil {
		return fmt.Errorf("SiTU: %w", err)
	}
	if err := c.ltGemm(dn, zs, h, w+uint64(2*2*ffn*latent), n, latent, ffn); err != nil {
		return fmt.Errorf("down: %w", err)
	}
	return nil
}
