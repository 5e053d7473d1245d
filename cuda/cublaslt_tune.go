package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/cuda/device"
)

// Tuning a pinned shape: cuBLASLt's heuristic ranks configurations for one n (ltRepN), and for the routed
// experts' two GEMMs its first is far from the fastest at the rows a pooled call gives an expert (K3's
// down GEMM at 4,700 rows: 578 TFLOP/s, the best valid configuration 713; TestCuBLASLtSurvey,
// docs/records/run66). tune times every configuration that passes plan's checks and pins the fastest.
//
// The bits do not move: each candidate's output is compared with the heuristic's first, bit for bit, at
// ltTuneCheckN rows before it is timed, and one that differs is never chosen. On the H200 with cuBLASLt
// 13.1 every valid configuration of every shape surveyed gave the same bits (the tensor cores sum each
// k chunk of 16 alike whatever the tile; no split of k), so the choice is one of speed alone, and a
// choice that differs between two processes (timing noise between near-equal configurations) gives the
// same results.

// ltTuneCheckN is the rows at which a candidate's bits are compared with the heuristic's first (not a
// multiple of any tile: partial tiles in both dimensions of the output).
const ltTuneCheckN = 300

// ltTuneRuns is how many timed runs a candidate gets at each n (after one untimed).
const ltTuneRuns = 3

// ltTuneRepN are the extra row counts the heuristic is asked about for candidates (beside ltRepN): it
// ranks different configurations first at different sizes.
var ltTuneRepN = []int{512, 16384, 65536}

// ltExpertTuneN are the rows an expert GEMM is timed at when its shape is tuned: an expert's share of a
// pooled call at 262,144 tokens x 16 of 896 experts (about 4,700) and at 65,536 (about 1,200). The
// candidate with the least summed time wins.
var ltExpertTuneN = []int{1200, 4700}

// key names a configuration by the attributes that tell two apart.
func (c ltConfig) key() string {
	return fmt.Sprintf("algo %d tile %d stages %d swizzle %d custom %d inner %d cluster %d",
		c.ID, c.Tile, c.Stages, c.Swizzle, c.Custom, c.InnerShape, c.ClusterShape)
}

// candidates returns the configurations for s's shape (m, k) that pass plan's checks, s's own first,
// from the heuristic at ltRepN and at ltTuneRepN, each once.
func (h *ltHandle) candidates(s *ltShape, m, k int) ([]ltShape, error) {
	out := []ltShape{*s}
	seen := map[string]bool{s.config.key(): true}
	probes := ltProbes(m, k)
	for _, rep := range append([]int{ltRepN}, ltTuneRepN...) {
		res, _, err := h.heuristicAt(s, m, k, ltMaxWorkspace, rep) // the plan's query at another n
		if err != nil {
			return nil, err
		}
		for i := range res {
			if res[i].State != bind.LtSuccess {
				continue
			}
			algo := res[i].Algo
			cfg, why, err := h.pin(s, &algo, m, k, probes)
			if err != nil {
				return nil, err
			}
			if why != "" || seen[cfg.key()] {
				continue
			}
			seen[cfg.key()] = true
			cand := *s
			cand.algo, cand.config = algo, cfg
			out = append(out, cand)
		}
	}
	return out, nil
}

// ltTune pins, for s (a planned shape, m x k weights), the fastest candidate over the row counts ns
// whose bits equal s's own, and records the trial in s.config.Tuned. Once per shape; runs on the CUDA
// thread, on the compute stream, with temporaries of the op (a weight and the largest n's operands:
// about 140 MB at K3's expert shapes, within the default budget's margin, replay/plan_budget.go memoryMargin),
// so the first expert call of a backend takes a few tens of milliseconds more.
func (c *opCtx) ltTune(s *ltShape, m, k int, ns []int) error {
	if s.tuned || !s.ok {
		return nil
	}
	s.tuned = true
	h := c.b.lt
	cands, err := h.candidates(s, m, k)
	if err != nil || len(cands) < 2 {
		return err
	}
	most := slices.Max(append(slices.Clone(ns), ltTuneCheckN))
	rng := rand.New(rand.NewPCG(uint64(m), uint64(k)))
	w, err1 := uploadTemp(c, randBF16Words(rng, m*k))
	x, err2 := uploadTemp(c, randBF16Words(rng, most*s.ldb))
	out, err3 := c.temp(most * m * s.outBytes())
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	t := newEventTimer(c)
	defer t.destroy()
	var want []int32
	best, bestMS := 0, math.Inf(1)
	var log []string
	for i := range cands {
		cand := &cands[i]
		if err := c.ltGemm(cand, out, x, w, ltTuneCheckN, m, k); err != nil {
			if i == 0 { // the configuration the shape runs anyway
				return fmt.Errorf("tuning %dx%d: %s: %w", m, k, cand.config.key(), err)
			}
			log = append(log, cand.config.key()+": refused ("+err.Error()+"), not chosen")
			continue
		}
		got := make([]int32, (ltTuneCheckN*m*s.outBytes()+3)/4)
		if err := download(c.b, got, out); err != nil {
			return err
		}
		if i == 0 {
			want = got
		} else if !bytes.Equal(bytesOf(got), bytesOf(want)) {
			log = append(log, cand.config.key()+": other bits, not chosen")
			continue
		}
		total := 0.0
		for _, n := range ns {
			ms, err := t.time(ltTuneRuns, func() error { return c.ltGemm(cand, out, x, w, n, m, k) })
			if err != nil && i == 0 {
				return fmt.Errorf("tuning %dx%d: %s at n=%d: %w", m, k, cand.config.key(), n, err)
			}
			if err != nil {
				log = append(log, fmt.Sprintf("%s: refused at n=%d (%v), not chosen", cand.config.key(), n, err))
				total = math.Inf(1)
				break
			}
			total += ms
		}
		if math.IsInf(total, 1) {
			continue
		}
		log = append(log, fmt.Sprintf("%s: %.4f ms", cand.config.key(), total))
		if total < bestMS {
			best, bestMS = i, total
		}
	}
	first := cands[0].config.key()
	s.algo, s.config = cands[best].algo, cands[best].config
	s.config.Tuned = fmt.Sprintf("fastest of %d valid configurations over n=%v (the heuristic's first: %s): %v", len(cands), ns, first, log)
	return nil
}

// adoptConfig pins for s the configuration ref runs (the same algorithm, tile, stages, swizzle and
// shapes: its key) where the heuristic offers it for s's layouts too, and leaves s's own otherwise:
// MatMulNarrow's bfloat16-output plan of a weight shape then runs MatMul's float32-output configuration,
// whose speed at the engine's row counts the runs measured (run 70: within 1.3% of the best of every
// form tried), rather than whatever the heuristic ranks first for another output type. The bits are
// MatMul's either way on the H200 (every configuration surveyed summed alike; TestMatMulNarrowBits).
func (h *ltHandle) adoptConfig(s, ref *ltShape, m, k int) error {
	cands, err := h.candidates(s, m, k)
	if err != nil {
		return err
	}
	for _, c := range cands {
		if c.config.key() == ref.config.key() {
			s.algo, s.config = c.algo, c.config
			s.config.Tuned = "the float32-output plan's configuration (" + ref.config.key() + ")"
			return nil
		}
	}
	return nil
}

// randBF16Words returns n random bfloat16 values packed two to an int32, the lower index in the low half:
// operands for timing and comparing bits, whose values do not matter beyond being ordinary numbers. Each
// is a random sign, exponent and 7 mantissa bits with magnitudes in [2^-7, 2): cheap to make (a K3 expert
// weight is 22 million values, made on first use) and no overflow in any sum of K3's sizes.
func randBF16Words(rng *rand.Rand, n int) []int32 {
	out := make([]int32, (n+1)/2)
	for i := range out {
		r := rng.Uint64()
		out[i] = int32(bf16Pattern(r) | bf16Pattern(r>>16)<<16)
	}
	return out
}

// bf16Pattern makes a bfloat16 bit pattern from 16 random bits: bit 15 the sign, bits 7-9 the exponent
// (biased 120-127), bits 0-6 the mantissa.
func bf16Pattern(r uint64) uint32 {
	return uint32(r&0x8000) | uint32(120+(r>>7)&7)<<7 | uint32(r&0x7f)
}

// eventTimer times work on the compute stream between two CUDA events (ltTune, and the timing tests), from
// a pool of timing events (device.EventPool, as the op profile's).
type eventTimer struct {
	c      *opCtx
	events device.EventPool
}

func newEventTimer(c *opCtx) *eventTimer {
	return &eventTimer{c: c, events: device.EventPool{What: "timing"}}
}

// time runs fn once untimed, then runs times between the events, and returns the milliseconds a run.
func (t *eventTimer) time(runs int, fn func() error) (float64, error) {
	if err := fn(); err != nil {
		return 0, err
	}
	return t.span(runs, fn)
}

// span runs fn runs times between the events (no warm-up) and returns the milliseconds a run.
func (t *eventTimer) span(runs int, fn func() error) (float64, error) {
	d, strm := t.c.b.drv, t.c.b.dv.Stream
	start, err := t.events.Record(d, strm)
	if err != nil {
		return 0, err
	}
	defer t.events.Put(start)
	for range runs {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	end, err := t.events.Record(d, strm)
	if err != nil {
		return 0, err
	}
	defer t.events.Put(end)
	if err := d.Check("cuEventSynchronize(timing)", bind.Call(d.CuEventSynchronize, end)); err != nil {
		return 0, err
	}
	var ms float32
	if err := d.Check("cuEventElapsedTime(timing)", bind.Call(d.CuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), start, end)); err != nil {
		return 0, err
	}
	return float64(ms) / float64(runs), nil
}

// destroy releases the events.
func (t *eventTimer) destroy() {
	_ = t.events.Destroy(t.c.b.drv) // at the end of a timing: a failed destroy leaks two events, nothing else
}
