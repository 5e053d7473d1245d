package replay

// How the plan runs MoE layers on a device that cannot hold a layer's routed experts beside a slice:
// the experts in chunks (EngineOptions.ExpertChunk, or chosen here when it is 0), layers unsliced when the
// wave fits so in one read, else MoE layers expert-major (planSlicing in plan.go tries the usual plan
// first).

import (
	"fmt"

	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// pickChunk chooses among plans with ever smaller expert chunks (at least one): the largest chunk that
// runs in one read with slices of at least sliceFloor tokens (or the whole wave), else the one-read plan
// with the largest slices, else the first. A large chunk means fewer uploads of an expert-major layer's
// inputs, but it leaves less room for slices, and each slice costs a read of the layer's weights by the
// device and, expert-major, a pass over every chunk.
func pickChunk(plans []WavePlan) WavePlan {
	var best *WavePlan
	for i := range plans {
		q := &plans[i]
		if q.Waves != 1 {
			continue
		}
		if q.Slices == 1 || q.SliceTokens >= min(sliceFloor, q.WaveTokens) {
			return *q
		}
		if best == nil || q.SliceTokens > best.SliceTokens {
			best = q
		}
	}
	if best != nil {
		return *best
	}
	return plans[0]
}

// planChunked plans lens for a device that cannot hold a layer's routed experts beside a slice (or, when
// starved, beside more than a starved slice of tokens), with chunk experts on the device at once: layers
// unsliced if the wave fits so in one read (and no slice size is given), else MoE layers expert-major,
// else unsliced in several reads.
func (e *Engine) planChunked(lens []int, chunk, starved int) (WavePlan, error) {
	why := fmt.Sprintf("a layer's routed experts, %s, do not fit the device at once beside a slice", numtext.Bytes(e.weightPeak(true)-e.uploaded()))
	if starved > 0 {
		why = fmt.Sprintf("a layer's routed experts, %s, leave the device room for slices of only %s tokens beside them",
			numtext.Bytes(e.weightPeak(true)-e.uploaded()), numtext.Commas(starved))
	}
	if e.opts.ExpertMajor {
		why = "--expert-major"
	}
	var whole *WavePlan // unsliced, when it plans
	if e.opts.SliceTokens == 0 && !(e.forceExpertMajor || e.opts.ExpertMajor) {
		if q, err := e.planWith(lens, modeWhole, chunk); err == nil {
			q.Note = fmt.Sprintf("layers unsliced: %s; experts in chunks of %d", why, chunk)
			if q.Waves == 1 {
				return q, nil
			}
			whole = &q
		}
	}
	// majorNote is an expert-major plan's note, where its expert inputs wait
	majorNote := func(q WavePlan, where string) string {
		return fmt.Sprintf("MoE layers expert-major, experts in chunks of %d, each serving every slice, slices pooled into expert calls of up to %s (%s; expert inputs %s)",
			chunk, numtext.Bytes(q.ExpertPool), why, where)
	}
	// expert-major with the expert inputs on the device where that still takes one read in slices of
	// sliceFloor tokens (or the whole wave, or --slice-tokens): no trip through host memory (a device of
	// 24 GB rarely has the room; one of 80 with a wave of tens of thousands of tokens does)
	if _, ok := e.Model.Ops.(ops.RowJoiner); ok && !e.forceHostStash {
		q, err := e.planWith(lens, modeMajorDevice, chunk)
		if err == nil && q.Waves == 1 && (q.Slices == 1 || q.SliceTokens >= min(sliceFloor, q.WaveTokens) || e.opts.SliceTokens > 0) {
			q.Note = majorNote(q, "kept on the device")
			return q, nil
		}
	}
	q, err := e.planWith(lens, modeMajor, chunk)
	if err != nil {
		if whole != nil { // unsliced in several reads of the weights: worse than expert-major, but it runs
			return *whole, nil
		}
		return q, err
	}
	q.Note = majorNote(q, numtext.Bytes(q.StashBytes)+" in host memory")
	return q, nil
}

// autoChunks are the expert chunks the plan tries when none is given: n/2, n/4, ... 1 (K3: 448, 224, 112,
// 56, 28, 14, 7, 3, 1).
func autoChunks(n int) []int {
	var out []int
	for c := n / 2; c >= 1; c /= 2 {
		out = append(out, c)
	}
	return out
}
