package cuda

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestExpertsPhasesTiming times the pieces of one pooled cuBLASLt expert call apart, at the size each of a
// MoE layer's seven calls has in the 262,144-token bench (a chunk of 128 of 896 experts over every
// slice's rows: about 600,000 gathered rows, 4,700 an expert), then the whole call: the gather (its
// kernels, and z's bfloat16 copy that the path's gather reads), the decode of the call's experts to bfloat16, the SiTU pass over every gathered row, the
// combine, and the GEMMs alone one after another. The pieces that are not GEMMs are what a GEMM with the gather, decode, SiTU and combine fused
// into it would save (cuda/DESIGN.md); each line gives the bytes it moves and the rate. The whole call
// also runs the GEMMs on its lanes, so it is not the sum. Skipped with -short; about 25 GB of device memory.
func TestExpertsPhasesTiming(t *testing.T) {
	skipTiming(t)
	b := testBackend(t, Options{Precision: ops.BF16})
	if b.lt == nil {
		t.Skip("cuBLASLt is not in use")
	}
	const latent, ffn, beta, linBeta = 3584, 3072, 4, 25
	const experts, chunk, rows, k = 896, 128, 262144, 16
	rng := rand.New(rand.NewPCG(13, 14))
	oes := k3Experts(t, b, rng, chunk) // the call's experts: ids 0 .. chunk-1 of the layer's 896
	rt := randRouting(rng, rows, k, experts, 0).Indexed()
	z := poolTensor(t, b, normalPool(rng), rows, latent)
	defer b.Free(z)
	acc, err := b.Zeros(rows, latent)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(acc)
	es := make([]*Expert, len(oes))
	ids := make([]int, len(oes))
	for i, e := range oes {
		es[i], ids[i] = e.(*Expert), e.(*Expert).id
	}
	work, err := rt.AssignRows(ids, rows)
	if err != nil {
		t.Fatal(err)
	}
	plan := planGroupedTiles(es, work, rows, xTileRows)
	n := plan.rows
	slot := 3 * ffn * latent // decoded values an expert
	flop := float64(n) * 3 * 2 * latent * ffn
	err = b.run("expert phases", func(c *opCtx) error {
		if err := b.joinExperts(es); err != nil {
			return err
		}
		gu, dn, why, err := c.ltExpertShapes(latent, ffn)
		if err != nil || why != "" {
			return fmt.Errorf("expert shapes: %v %s", err, why)
		}
		zp, ap := z.(*Tensor).ptr, acc.(*Tensor).ptr
		d, err := c.prepareGrouped(&plan, ap, zp, latent, ffn, beta, linBeta, "")
		if err != nil {
			return err
		}
		if err := c.groupedSiTUTables(d); err != nil {
			return err
		}
		wdec, err := c.temp(2 * slot * 16) // a decode chunk of 16 experts, as ltDecodeBytes gives at K3's sizes
		if err != nil {
			return err
		}
		gub, err := c.temp(2 * n * 2 * ffn)
		if err != nil {
			return err
		}
		zb, err := c.temp(2 * rows * latent)
		if err != nil {
			return err
		}
		groups := (slot/32 + xThreads - 1) / xThreads
		phases := []struct {
			what  string
			bytes float64 // the traffic the piece needs at least
			fn    func() error
		}{
			// z rows read as float32, written as bfloat16
			{"gather, k_experts_gather (4 a thread)", float64(n) * latent * 6, func() error {
				return c.launch1D("k_experts_gather", n*latent/4, d.zs, d.z, d.at(plan.offRows), int64(n), int32(latent))
			}},
			{"gather, k_experts_gather8 (float32 z)", float64(n) * latent * 6, func() error { return c.groupedGather(d) }},
			// the copy of z the cuBLASLt path makes once for a layer's calls, then its gather
			{"z's bfloat16 copy (once a pooled layer)", float64(rows) * latent * 6, func() error { return c.toBF16(zb, zp, rows, latent, latent) }},
			{"gather, the path's (from the copy)", float64(n) * latent * 4, func() error {
				db := *d
				db.zb = zb
				return c.groupedGather(&db)
			}},
			// MXFP4 read (4 bits a value and a scale byte for 32), bfloat16 written
			{"decode, k_experts_decode (32 codes a thread)", float64(len(plan.nonzero)) * float64(slot) * (2 + 4.25/8), func() error {
				for j0 := 0; j0 < len(plan.nonzero); j0 += 16 {
					cnt := min(16, len(plan.nonzero)-j0)
					if err := c.launch("k_experts_decode", d2(groups, cnt), d1(xThreads), 0,
						wdec, d.tab, d.at(plan.offList+j0), int32(ffn), int32(latent)); err != nil {
						return err
					}
				}
				return nil
			}},
			{"decode, the path's", float64(len(plan.nonzero)) * float64(slot) * (2 + 4.25/8), func() error {
				for j0 := 0; j0 < len(plan.nonzero); j0 += 16 {
					if err := c.decodeExperts(wdec, d.tab, d.at(plan.offList+j0), min(16, len(plan.nonzero)-j0), ffn, latent); err != nil {
						return err
					}
				}
				return nil
			}},
			// gate/up outputs read (bfloat16), h written
			{"SiTU pass over the gathered rows", float64(n) * ffn * 6, func() error { return c.situRows(d.h, gub, n, ffn, d.situ) }},
			// the down outputs read (bfloat16), acc read and written (float32) for every touched row
			{"combine, k_experts_combine (2 a thread)", float64(n)*latent*2 + float64(plan.touched)*latent*8, func() error {
				return c.launch("k_experts_combine", d1(plan.touched), d1(xCombThread), 0, d.acc, d.zs, d.at(plan.offRowPtr),
					d.at(plan.offRowID), d.at(plan.offPos), d.at(plan.offW), int32(latent))
			}},
			{"combine, the path's", float64(n)*latent*2 + float64(plan.touched)*latent*8, func() error { return c.groupedCombine(d) }},
			// every expert's two GEMMs at its rows in blocks of ltExpertRows, one after another on the
			// compute stream, the experts taking turns over the decode buffer's 16 (1 GB: their weights
			// come from memory, not the L2, as in the call): the call's GEMM time without lanes (bytes:
			// none counted). Every block reads the first gathered rows (at most 29 MB at K3's sizes),
			// which may stay in the L2, so the rate is an upper estimate of the call's GEMMs.
			{"GEMMs alone, one stream", 0, func() error {
				for j, i := range plan.nonzero {
					w := wdec + uint64(2*slot*(j%16))
					for r0 := 0; r0 < plan.counts[i]; r0 += ltExpertRows {
						rn := min(ltExpertRows, plan.counts[i]-r0)
						if err := c.ltGemm(gu, gub, d.zs, w, rn, 2*ffn, latent); err != nil {
							return err
						}
						if err := c.ltGemm(dn, d.zs, d.h, w+uint64(2*2*ffn*latent), rn, latent, ffn); err != nil {
							return err
						}
					}
				}
				return nil
			}},
			// the same GEMMs over each expert's own gathered rows, as the call runs them (no block reads
			// another's rows: the L2 holds none of them ahead), then with the SiTU pass between them, as
			// expertLtRows runs them: with the pieces above, where the whole call's time goes
			{"GEMMs at the call's rows, one stream", 0, func() error { return callGEMMs(c, d, gu, dn, wdec, gub, &plan, slot, false) }},
			{"GEMMs and SiTU at the call's rows, one stream", 0, func() error { return callGEMMs(c, d, gu, dn, wdec, gub, &plan, slot, true) }},
		}
		for _, p := range phases {
			ms, err := eventTime(c, 5, p.fn)
			if err != nil {
				return fmt.Errorf("%s: %w", p.what, err)
			}
			rate := fmt.Sprintf("%7.1f GB/s", p.bytes/ms/1e6)
			if p.bytes == 0 {
				rate = fmt.Sprintf("%7.1f TFLOP/s", flop/ms/1e9)
			}
			t.Logf("TIMING expert call phases, %d experts, %d gathered rows, %d touched: %-38s %8.3f ms %s",
				len(plan.nonzero), n, plan.touched, p.what, ms, rate)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Timed as the engine runs them, each call an op of its own (its temporaries freed when it ends;
	// inside one op they would pile up and the pool grow): first the GEMMs and SiTU pass at the call's
	// rows alone, what the call's own step of them should take (runs 100-102: 54 ms back to back above,
	// 63 here); then the whole call on the default lanes and on the compute stream alone, with an event
	// at each step's end (opCtx.steps), every step on the compute stream when it runs alone.
	err = expertCallSteps(t, b, "the GEMMs and SiTU alone", flop, func(c *opCtx) error {
		gu, dn, _, err := c.ltExpertShapes(latent, ffn)
		if err != nil {
			return err
		}
		d, err := c.gatheredCall(&plan, acc.(*Tensor).ptr, z.(*Tensor).ptr, latent, ffn, beta, linBeta, "")
		if err != nil {
			return err
		}
		wdec, err := c.temp(2 * slot * 16)
		if err != nil {
			return err
		}
		gub, err := c.temp(2 * ltExpertRows * 2 * ffn)
		if err != nil {
			return err
		}
		if err := c.decodeExperts(wdec, d.tab, d.at(plan.offList), 16, ffn, latent); err != nil {
			return err
		}
		c.stepDone("setup, gather, one decode")
		if err := callGEMMs(c, d, gu, dn, wdec, gub, &plan, slot, true); err != nil {
			return err
		}
		c.stepDone("GEMMs and SiTU at the call's rows")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, lanes := range []int{0, 1} {
		was := b.opts.ExpertStreams
		b.opts.ExpertStreams = lanes
		err := expertCallSteps(t, b, fmt.Sprintf("%d experts, %d gathered rows, %d lanes", len(plan.nonzero), n, b.expertStreamCount()), flop,
			func(c *opCtx) error {
				gu, dn, _, err := c.ltExpertShapes(latent, ffn)
				if err != nil {
					return err
				}
				zt := z.(*Tensor)
				zb, err := c.narrowOf(zt, latent)
				if err != nil {
					return err
				}
				return c.expertsLt(&plan, gu, dn, acc.(*Tensor).ptr, zt.ptr, zb, latent, ffn, beta, linBeta)
			})
		b.opts.ExpertStreams = was
		if err != nil {
			t.Fatal(err)
		}
	}
}

// expertCallSteps runs call as an op once untimed, then three times timed, each between two events on
// the compute stream with an event at each step's end (opCtx.steps), and logs the median call and, from
// the last run, each step's device time (from the step before's end; summed over its repeats) and the
// host's time in it.
func expertCallSteps(t *testing.T, b *Backend, what string, flop float64, call func(c *opCtx) error) error {
	if err := b.run("expert call (warm-up)", call); err != nil {
		return err
	}
	type mark struct {
		step string
		ev   uintptr
		host time.Duration
	}
	var calls []float64
	var lastMarks []mark
	var lastDev []float32
	for range 3 {
		var marks []mark
		var devs []float32
		err := b.run("expert call", func(c *opCtx) error {
			tm := newEventTimer(c)
			defer tm.destroy()
			d, strm := b.drv, b.dv.Stream
			t0 := time.Now()
			ev0, err := tm.events.Record(d, strm)
			if err != nil {
				return err
			}
			var recErr error
			c.steps = func(step string) {
				ev, err := tm.events.Record(d, strm)
				if err != nil {
					recErr = err
					return
				}
				marks = append(marks, mark{step, ev, time.Since(t0)})
			}
			err = call(c)
			c.steps = nil
			if err = errors.Join(err, recErr); err != nil {
				return err
			}
			if len(marks) == 0 {
				return fmt.Errorf("no steps marked")
			}
			last := marks[len(marks)-1].ev
			if err := d.Check("cuEventSynchronize(steps)", bind.Call(d.CuEventSynchronize, last)); err != nil {
				return err
			}
			prev := ev0
			for _, m := range marks {
				var ms float32
				if err := d.Check("cuEventElapsedTime(steps)", bind.Call(d.CuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), prev, m.ev)); err != nil {
					return err
				}
				devs, prev = append(devs, ms), m.ev
			}
			return nil
		})
		if err != nil {
			return err
		}
		var sum float64
		for _, v := range devs {
			sum += float64(v)
		}
		calls, lastMarks, lastDev = append(calls, sum), marks, devs
	}
	slices.Sort(calls)
	t.Logf("TIMING expert call steps, %s: the whole call %8.3f ms %7.1f TFLOP/s (median of 3, each an op)", what, calls[1], flop/calls[1]/1e9)
	var order []string
	dev, host, count := map[string]float64{}, map[string]float64{}, map[string]int{}
	var before time.Duration
	for i, m := range lastMarks {
		if count[m.step] == 0 {
			order = append(order, m.step)
		}
		dev[m.step] += float64(lastDev[i])
		host[m.step] += float64(m.host-before) / 1e6
		count[m.step]++
		before = m.host
	}
	for _, step := range order {
		t.Logf("TIMING expert call steps, %s: %-36s %3d x, device %8.3f ms, host %8.3f ms", what, step, count[step], dev[step], host[step])
	}
	return nil
}

// callGEMMs runs each expert's two GEMMs over its own gathered rows of d (plan's order, blocks of
// ltExpertRows), the experts taking turns over the 16 decoded slots at wdec, on the compute stream; with
// situ, the SiTU pass between them, as the call runs them (expertLtRows).
func callGEMMs(c *opCtx, d *groupedDev, gu, dn *ltShape, wdec, gub uint64, plan *groupedPlan, slot int, situ bool) error {
	latent, ffn := d.latent, d.ffn
	first := 0
	for i := range plan.counts {
		if plan.counts[i] == 0 {
			continue
		}
		j := slices.Index(plan.nonzero, i)
		w := wdec + uint64(2*slot*(j%16))
		for r0 := 0; r0 < plan.counts[i]; r0 += ltExpertRows {
			rn, row := min(ltExpertRows, plan.counts[i]-r0), first+r0
			if situ {
				if err := c.expertLtRows(d, gu, dn, w, gub, row, rn); err != nil {
					return err
				}
				continue
			}
			zs, h := d.zs+uint64(2*row*latent), d.h+uint64(2*row*ffn)
			if err := c.ltGemm(gu, gub, zs, w, rn, 2*ffn, latent); err != nil {
				return err
			}
			if err := c.ltGemm(dn, zs, h, w+uint64(2*2*ffn*latent), rn, latent, ffn); err != nil {
				return err
			}
		}
		first += plan.counts[i]
	}
	return nil
}

// gatheredCall prepares a grouped call on the op (prepareGrouped), gathers its rows and makes the SiTU
// tables: what the call's GEMM kernels read, for tests that time or run those kernels.
func (c *opCtx) gatheredCall(p *groupedPlan, acc, z uint64, latent, ffn int, beta, linBeta float32, suffix string) (*groupedDev, error) {
	d, err := c.prepareGrouped(p, acc, z, latent, ffn, beta, linBeta, suffix)
	if err != nil {
		return nil, err
	}
	if err := c.groupedGather(d); err != nil {
		return nil, err
	}
	return d, c.groupedSiTUTables(d)
}
